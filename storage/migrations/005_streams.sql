-- Streamed messages: 'open' is a message Slack already shows (its ts is in remote_ref, recorded
-- as soon as chat.startStream returned it) whose stream has not been completed yet: a reply
-- still being written, an acknowledgment whose subtasks still run, or one a dead process left
-- behind. Whoever publishes the row next completes that message instead of posting another.
ALTER TABLE outbox DROP CONSTRAINT outbox_state_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_state_check
    CHECK (state IN ('sending', 'sent', 'unsent', 'open'));
