-- Pictures people showed the bot, stored with the turn they came with (one row each, in
-- the order of the message's files), so every later round and reply in the thread sees
-- them without downloading them again. Written in the admission that stores the turn;
-- gone with it. Only what a model reads is kept: no URL, no Slack file id, no token.
CREATE TABLE message_attachments (
    message_id  text NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    ordinal     integer NOT NULL,
    name        text NOT NULL,
    media_type  text NOT NULL
                CHECK (media_type IN ('image/png', 'image/jpeg', 'image/gif', 'image/webp')),
    data        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, ordinal)
);
