-- Pictures and deletions (issue 37, item 6): budgets for stored pictures, and a deleted
-- message's pictures deleted with it (storage/pictures.py, storage/lifecycle.py).

-- Bytes of pictures a thread has stored over its life (its budget, counted at admission;
-- never given back). Gone with the session.
ALTER TABLE sessions ADD COLUMN picture_bytes bigint NOT NULL DEFAULT 0;

-- Bytes of pictures a workspace (the address's `team`) stored in a UTC day. A row is
-- bumped by an upsert at admission, whose row lock serialises concurrent admissions;
-- retention prunes the days that are over.
CREATE TABLE picture_days (
    workspace  text NOT NULL,
    day        date NOT NULL,
    bytes      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace, day)
);

-- What a turn says of its pictures that were not kept (over a budget): appended to its
-- text at admission, and kept here so an edit, which replaces the text, appends it again.
ALTER TABLE messages ADD COLUMN pictures_note text;

-- Pictures of messages deleted before this migration went on being sent to the model:
-- they go now, as a deletion's do from here on.
DELETE FROM message_attachments a USING messages m
WHERE m.id = a.message_id AND m.deleted_at IS NOT NULL;
