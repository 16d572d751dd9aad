-- Events Slack delivered, so a redelivery is recognised and acked without a second task.
CREATE TABLE seen_events (
    event_id   text PRIMARY KEY,
    seen_at    timestamptz NOT NULL DEFAULT now()
);

-- A conversation: a Slack thread, or a DM's running conversation.
CREATE TABLE sessions (
    id          text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- History, text only. `anchor` is the seq of the user turn a message belongs to, so that
-- an answer sorts right after its question even when later questions were stored first.
CREATE TABLE messages (
    seq         bigserial PRIMARY KEY,
    id          text NOT NULL UNIQUE,
    session_id  text NOT NULL REFERENCES sessions (id),
    anchor      bigint NOT NULL,
    role        text NOT NULL CHECK (role IN ('user', 'assistant')),
    kind        text NOT NULL CHECK (kind IN ('turn', 'ack', 'reply')),
    text        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_window ON messages (session_id, anchor DESC, seq DESC);

-- One task per Slack message. `seq` orders tasks within a session.
CREATE TABLE tasks (
    id             text PRIMARY KEY,
    seq            bigserial NOT NULL UNIQUE,
    session_id     text NOT NULL REFERENCES sessions (id),
    address        jsonb NOT NULL,
    state          text NOT NULL DEFAULT 'queued'
                   CHECK (state IN ('queued', 'running', 'done', 'failed')),
    attempts       integer NOT NULL DEFAULT 0,
    run_after      timestamptz NOT NULL DEFAULT now(),
    lease_pid      integer,
    lease_backend  timestamptz,
    lease_expires  timestamptz,
    last_error     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz
);
-- Only unfinished tasks are ever searched; done ones drop out of the index.
CREATE INDEX tasks_open ON tasks (session_id, seq) WHERE state IN ('queued', 'running');
CREATE INDEX tasks_runnable ON tasks (seq) WHERE state IN ('queued', 'running');

-- One row per post to Slack, keyed by the message id, so a post happens once.
CREATE TABLE outbox (
    id          text PRIMARY KEY,
    state       text NOT NULL CHECK (state IN ('sending', 'sent')),
    attempts    integer NOT NULL DEFAULT 1,
    remote_ref  text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
