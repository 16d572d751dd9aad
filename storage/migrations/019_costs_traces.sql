-- What each answer cost, and its trace (issue 33).

-- Every model response, as it was charged: who and where it answered (the task's workspace,
-- channel and user), the route, the tokens as the provider reported them (input the whole
-- prompt, the cached and cache-written parts included) and its cost in USD by the price
-- table at the time (NULL: the table did not know the model; never counted as zero).
-- `threadgate usage` sums these rows; they go with their task (storage/retention.py).
CREATE TABLE model_usage (
    id                  bigserial PRIMARY KEY,
    at                  timestamptz NOT NULL DEFAULT now(),
    task_id             text NOT NULL,
    workspace           text,
    channel             text,
    user_id             text,
    provider            text NOT NULL,
    model               text NOT NULL,
    slot                integer NOT NULL DEFAULT 0,
    input_tokens        bigint NOT NULL DEFAULT 0,
    cached_tokens       bigint NOT NULL DEFAULT 0,
    cache_write_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    cost_usd            numeric
);
CREATE INDEX model_usage_at ON model_usage (at);
CREATE INDEX model_usage_task ON model_usage (task_id);

-- The day's spend beside its tokens, for the daily spend limits (read at admission like the
-- token budgets), and the workspace as a third scope beside user and channel.
ALTER TABLE usage_daily ADD COLUMN cost_usd numeric NOT NULL DEFAULT 0;
ALTER TABLE usage_daily DROP CONSTRAINT usage_daily_scope_check;
ALTER TABLE usage_daily ADD CONSTRAINT usage_daily_scope_check
    CHECK (scope IN ('user', 'channel', 'workspace'));

-- The trace of the task's message (W3C traceparent), written at admission when tracing is
-- on: every lease of the task, on any replica, and each subtask continue it.
ALTER TABLE tasks ADD COLUMN traceparent text;
