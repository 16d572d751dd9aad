-- What the bot remembers (issue 12): prompt epochs, the route of every answer, pinned
-- messages and summaries of what no longer fits the window.

-- A system prompt's text, stored once by the hash of its text. A session is pinned to the
-- epoch of its first task, so a deploy that changes the prompt leaves ongoing threads on
-- the prompt they started with (until their next compaction or `threadgate sessions reset`).
CREATE TABLE prompt_epochs (
    hash        text PRIMARY KEY,
    version     text NOT NULL,
    text        text NOT NULL,
    first_seen  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE sessions ADD COLUMN prompt_epoch text REFERENCES prompt_epochs (hash);

-- Which prompt and which model slot produced a stored reply or acknowledgment (null for
-- people's turns, and for answers stored before this migration).
ALTER TABLE messages ADD COLUMN prompt_epoch text;
ALTER TABLE messages ADD COLUMN route_provider text;
ALTER TABLE messages ADD COLUMN route_model text;
ALTER TABLE messages ADD COLUMN route_slot text CHECK (route_slot IN ('primary', 'fallback'));

-- Pinned messages stay in the model's window. `provenance` says why a row exists when it is
-- not a turn, an acknowledgment or a reply of ours: 'pin' is a message someone pinned that
-- was never stored otherwise (kept as a retained user turn of its session).
ALTER TABLE messages ADD COLUMN pinned boolean NOT NULL DEFAULT false;
ALTER TABLE messages ADD COLUMN pinned_at timestamptz;
ALTER TABLE messages ADD COLUMN provenance text;
CREATE INDEX messages_pinned ON messages (session_id, pinned_at DESC) WHERE pinned;

-- A summary of a session's older turns, written by the model when the thread outgrew the
-- window. It covers the messages anchored from `covers_from_seq` to `covers_to_seq` (seqs
-- of user turns); a newer summary covers the previous one too, so only the latest is read.
CREATE TABLE summaries (
    id               bigserial PRIMARY KEY,
    session_id       text NOT NULL REFERENCES sessions (id),
    covers_from_seq  bigint NOT NULL,
    covers_to_seq    bigint NOT NULL,
    text             text NOT NULL,
    prompt_epoch     text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, covers_to_seq)
);

-- Who reset a session's prompt epoch (`threadgate sessions reset`), when and why.
CREATE TABLE session_interventions (
    id          bigserial PRIMARY KEY,
    session_id  text NOT NULL REFERENCES sessions (id),
    action      text NOT NULL CHECK (action IN ('reset')),
    actor       text NOT NULL,
    reason      text,
    from_epoch  text,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX session_interventions_session ON session_interventions (session_id, id);

-- A pin names a message by its Slack ts: ours are found through the ts their post got.
CREATE INDEX outbox_remote_ref ON outbox (remote_ref) WHERE remote_ref IS NOT NULL;
