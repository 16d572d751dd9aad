-- Edits, deletions, citations and retention (issue 12, items 2 and 6).

-- An edited turn keeps its row (and its place in the conversation) with the new text;
-- `edited_at` is when the person edited it (the edit's Slack ts), so an older edit that
-- arrives late never overwrites a newer one.
ALTER TABLE messages ADD COLUMN edited_at timestamptz;

-- A deleted turn is a tombstone: its text is replaced by a note that it was deleted (the
-- model never sees the words again) and the row stays, so the reply that answered it keeps
-- its anchor and a running task still finds its own turn (storage/lifecycle.py).
ALTER TABLE messages ADD COLUMN deleted_at timestamptz;

-- What a final reply cites: `[{"message": id}, {"url": "https://…"}]`, rendered under the
-- reply as its Sources line (gateway/sources.py).
ALTER TABLE messages ADD COLUMN citations jsonb;

-- Retention (storage/retention.py) looks for finished tasks by age.
CREATE INDEX tasks_finished ON tasks (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX seen_events_age ON seen_events (seen_at);
