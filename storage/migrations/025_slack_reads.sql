-- The agent sees what the person sees under Slack's read limits (issue 43, items 1 to 5):
-- Slack's reads paced for every replica (storage/slack_reads.py).

-- The read budget of each workspace and method (`conversations.replies`,
-- `conversations.history`): the earliest time the next call may be made, for every replica
-- together. A call is taken by one conditional upsert that moves `next_at` on by the
-- tier's interval; a `ratelimited` answer pushes it to what Slack's Retry-After said.
CREATE TABLE slack_read_budgets (
    team     text NOT NULL,
    method   text NOT NULL,
    next_at  timestamptz NOT NULL,
    PRIMARY KEY (team, method)
);

-- The read tier a workspace was found in (THREADGATE_SLACK_READ_TIER=auto): `limited`
-- (1 read per minute per method, 15 messages a page) once a page came back capped at 15
-- messages with more to read, or a read was answered `ratelimited`; what showed it, when.
CREATE TABLE slack_read_tiers (
    team      text PRIMARY KEY,
    tier      text NOT NULL CHECK (tier IN ('internal', 'limited')),
    evidence  text NOT NULL,
    found_at  timestamptz NOT NULL DEFAULT now()
);
