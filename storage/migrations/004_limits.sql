-- Abuse and cost guard rails (issue 10, item 9).

-- Who a task answers and where, so the model's usage can be charged to both; and the
-- model requests it made so far, across rounds, subtasks and replicas.
ALTER TABLE tasks ADD COLUMN user_id text;
ALTER TABLE tasks ADD COLUMN channel text;
ALTER TABLE tasks ADD COLUMN model_requests integer NOT NULL DEFAULT 0;

-- Messages admitted or refused per user and per thread in each clock hour (UTC). One row
-- per key and window, bumped by an upsert at admission: the row lock serialises replicas,
-- so a limit is exact, never "roughly" kept.
CREATE TABLE admission_counts (
    scope         text NOT NULL CHECK (scope IN ('user', 'thread')),
    key           text NOT NULL,
    window_start  timestamptz NOT NULL,
    messages      integer NOT NULL,
    PRIMARY KEY (scope, key, window_start)
);

-- Tokens the providers reported, per UTC day, per user and per channel.
CREATE TABLE usage_daily (
    day            date NOT NULL,
    scope          text NOT NULL CHECK (scope IN ('user', 'channel')),
    key            text NOT NULL,
    input_tokens   bigint NOT NULL DEFAULT 0,
    output_tokens  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (day, scope, key)
);

-- The one polite notice per limit and window: claimed by whichever replica gets there first.
CREATE TABLE limit_notices (
    scope         text NOT NULL,
    key           text NOT NULL,
    window_start  timestamptz NOT NULL,
    task_id       text NOT NULL,
    PRIMARY KEY (scope, key, window_start)
);
