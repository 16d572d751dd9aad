-- Capabilities and routes (issue 35, items 2 and 3); 020 and 021 are schedules and epochs.

-- A person's PDFs are stored beside their turn like pictures, for the models that read
-- documents natively (agent/core/documents.py), with the pages the decoder counted.
ALTER TABLE message_attachments DROP CONSTRAINT message_attachments_media_type_check;
ALTER TABLE message_attachments ADD CONSTRAINT message_attachments_media_type_check
    CHECK (media_type IN ('image/png', 'image/jpeg', 'image/gif', 'image/webp', 'application/pdf'));
ALTER TABLE message_attachments ADD COLUMN pages integer NOT NULL DEFAULT 0;

-- An attachment a provider refused (a 400 about it): marked when, and by which route
-- (`provider:model`), and its bytes dropped, so no later window of any replica carries it
-- again; its turn's text says it was not shown (storage/pictures.py).
ALTER TABLE message_attachments ADD COLUMN refused_at timestamptz;
ALTER TABLE message_attachments ADD COLUMN refused_by text;

-- Which route of the fallback chain answered (0 the first), beside `route_slot`, which
-- says only primary or fallback.
ALTER TABLE messages ADD COLUMN route_index integer;
