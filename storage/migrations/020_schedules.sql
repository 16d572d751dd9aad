-- Work that runs on a schedule (issue 34): a prompt posted to a channel, a thread or a
-- person's DM once per period (storage/schedules.py).
--
-- `next_run_at` is the start of the next period to run. Whichever replica's scheduler
-- looks first locks the row (FOR UPDATE SKIP LOCKED), inserts the period's task — its id
-- derived from the schedule and the period, ON CONFLICT DO NOTHING — and moves
-- `next_run_at` past now, in one transaction: a period is run once however many replicas
-- look and whenever one crashes.
CREATE TABLE schedules (
    id            bigserial PRIMARY KEY,
    team          text NOT NULL,
    enterprise    text,
    -- channel: a top-level post, a new thread per run; thread: in that thread; dm: the
    -- DM of `dm_user` (its channel found with conversations.open, kept in `channel`).
    target        text NOT NULL CHECK (target IN ('channel', 'thread', 'dm')),
    channel       text,
    thread_ts     text,
    dm_user       text,
    prompt        text NOT NULL,
    -- every: `every_seconds` from `anchor_at`; cron: `cron` in `time_zone`; at: once, at `at`.
    kind          text NOT NULL CHECK (kind IN ('every', 'cron', 'at')),
    every_seconds integer CHECK (every_seconds > 0),
    cron          text,
    time_zone     text NOT NULL DEFAULT 'UTC',
    at            timestamptz,
    anchor_at     timestamptz NOT NULL DEFAULT now(),
    -- Periods missed while no scheduler ran: one run for all of them, or none.
    missed        text NOT NULL DEFAULT 'catch_up' CHECK (missed IN ('catch_up', 'skip')),
    -- The person it belongs to ("team:user"), who may list and delete it; NULL: operators'.
    owner         text,
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    state         text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'paused', 'done')),
    paused_reason text,
    paused_by     text,
    paused_at     timestamptz,
    next_run_at   timestamptz,
    last_run_at   timestamptz,
    last_task_id  text,
    skipped       integer NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (target <> 'channel' OR channel IS NOT NULL),
    CHECK (target <> 'thread' OR (channel IS NOT NULL AND thread_ts IS NOT NULL)),
    CHECK (target <> 'dm' OR dm_user IS NOT NULL)
);
-- What the scheduler asks: the earliest active period.
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE state = 'active';
CREATE INDEX schedules_owner ON schedules (owner) WHERE owner IS NOT NULL;

-- A run is a task like any other, marked with its schedule (no foreign key: a deleted
-- schedule's runs stay, with their history, until retention takes them).
ALTER TABLE tasks ADD COLUMN schedule_id bigint;
CREATE INDEX tasks_schedule ON tasks (schedule_id, seq DESC) WHERE schedule_id IS NOT NULL;
