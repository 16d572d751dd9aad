-- The agent sees what the person sees under Slack's read limits (issue 43, items 1 to 5):
-- Slack's reads paced for every replica, and the messages the app receives kept, so that
-- few reads are needed (storage/slack_reads.py, storage/seen_messages.py).

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

-- Every person's message the app receives in a conversation it takes part in, rendered
-- as the model reads it (a provenance tag, pasted credentials redacted), kept under the
-- retention TTL: context is read from here first. `root` is its thread's ts, '' for a
-- message at the top of a channel (which is also the root of its own thread). An edit
-- replaces `text`; a deletion deletes the row.
CREATE TABLE slack_messages (
    team        text NOT NULL,
    channel     text NOT NULL,
    ts          text NOT NULL,
    root        text NOT NULL,
    text        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team, channel, ts)
);
CREATE INDEX slack_messages_stream ON slack_messages (team, channel, root, (ts::numeric) DESC);
CREATE INDEX slack_messages_age ON slack_messages (created_at);

-- What the store holds of each stream of messages: a thread (`root` its ts) or the top of
-- a channel (`root` ''). Every message of the stream from `complete_from` through
-- `complete_through` is in `slack_messages` (for a thread, from its root: `complete_from`
-- is the root; NULL `complete_through`: nothing is known complete). `gap` counts the
-- messages known not to have been read (-1: some, Slack gave no count), to be read at the
-- stream's next turn, paced, from `complete_through` on.
CREATE TABLE slack_streams (
    team              text NOT NULL,
    channel           text NOT NULL,
    root              text NOT NULL,
    complete_from     text,
    complete_through  text,
    gap               integer CHECK (gap IS NULL OR gap >= -1),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team, channel, root)
);
CREATE INDEX slack_streams_age ON slack_streams (updated_at);

-- A message event kept (`p_root` '' at the top of a channel), and what it tells of its
-- streams. A message at the top of a channel begins its own thread: that thread is
-- complete from it. A `message` event (`p_extends`: Slack sends one for every message of
-- the conversations the app subscribes to) extends a stream known complete through an
-- earlier message, and begins the channel's top-level stream; an `app_mention` alone
-- (sent without that subscription) proves nothing about the messages before it.
-- Returns the thread's stream as it is now, and whether the thread's session exists.
CREATE FUNCTION observe_message(
    p_team text, p_channel text, p_ts text, p_root text, p_text text, p_extends boolean,
    p_session text
) RETURNS TABLE (complete_through text, gap integer, known boolean)
LANGUAGE plpgsql AS $$
DECLARE
    thread text := CASE WHEN p_root = '' THEN p_ts ELSE p_root END;
BEGIN
    INSERT INTO slack_messages (team, channel, ts, root, text)
    VALUES (p_team, p_channel, p_ts, p_root, p_text)
    ON CONFLICT (team, channel, ts) DO NOTHING;
    IF p_root = '' THEN
        INSERT INTO slack_streams AS s (team, channel, root, complete_from, complete_through)
        VALUES (p_team, p_channel, p_ts, p_ts, p_ts)
        ON CONFLICT (team, channel, root) DO UPDATE SET complete_from = p_ts,
            complete_through = CASE WHEN s.complete_through IS NULL
                                      OR s.complete_through::numeric < p_ts::numeric
                                    THEN p_ts ELSE s.complete_through END,
            updated_at = now();
        IF p_extends THEN
            INSERT INTO slack_streams AS s (team, channel, root, complete_from, complete_through)
            VALUES (p_team, p_channel, '', p_ts, p_ts)
            ON CONFLICT (team, channel, root) DO UPDATE SET
                complete_through = CASE WHEN s.complete_through IS NULL
                                          OR s.complete_through::numeric < p_ts::numeric
                                        THEN p_ts ELSE s.complete_through END,
                complete_from = coalesce(s.complete_from, p_ts),
                updated_at = now();
        END IF;
    ELSIF p_extends THEN
        UPDATE slack_streams s SET complete_through = p_ts, updated_at = now()
        WHERE s.team = p_team AND s.channel = p_channel AND s.root = p_root
          AND s.complete_through IS NOT NULL AND s.complete_through::numeric < p_ts::numeric;
    END IF;
    SELECT s.complete_through, s.gap INTO complete_through, gap FROM slack_streams s
    WHERE s.team = p_team AND s.channel = p_channel AND s.root = thread;
    known := EXISTS (SELECT 1 FROM sessions WHERE id = p_session);
    RETURN NEXT;
END
$$;
