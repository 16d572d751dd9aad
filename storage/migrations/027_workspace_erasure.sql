-- Data hygiene for distributed installs (issue 43, item 7): when the app is uninstalled
-- from a workspace (or its bot tokens are revoked), what it stored of that workspace is
-- deleted (storage/erasure.py).

-- A workspace whose stored content is to be deleted, one row per workspace: written when
-- the uninstall is handled (before the ack), deleted once nothing of the workspace is left.
-- `workspace` is the key every session id of the workspace starts with: its team id, or
-- an org-wide install's enterprise id. `event_id` is the delivery that asked for it.
CREATE TABLE workspace_erasures (
    workspace     text PRIMARY KEY,
    reason        text NOT NULL,
    event_id      text,
    requested_at  timestamptz NOT NULL DEFAULT now()
);

-- A workspace's rows, found without reading every workspace's: session ids (and so the
-- `session_id` of tasks, messages and summaries) are `workspace:channel[:thread]`.
-- split_part is immutable, so the indexes hold whatever the database's collation is (a
-- prefix LIKE would need the C collation or text_pattern_ops to use a btree). Built while
-- the migration holds its lock: on a large `messages` table this takes a while once.
CREATE INDEX sessions_workspace ON sessions (split_part(id, ':', 1));
CREATE INDEX tasks_workspace ON tasks (split_part(session_id, ':', 1));
CREATE INDEX messages_workspace ON messages (split_part(session_id, ':', 1));
CREATE INDEX summaries_workspace ON summaries (split_part(session_id, ':', 1));
CREATE INDEX model_usage_workspace ON model_usage (workspace);

-- Deleting a session makes Postgres look for tasks that still name it (their foreign key),
-- and the only index on tasks.session_id was for unfinished ones: each deleted session read
-- the whole table. The retention job's deletion of empty sessions pays the same look.
CREATE INDEX tasks_session ON tasks (session_id);
