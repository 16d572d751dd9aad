-- A PDF's text layer beside the PDF kept as a document (issue 47, items 3 and 10).

-- The block of the turn's text that carries the PDF's text layer, exactly as the turn has
-- it (escaped, as the gateway rendered it): a model that reads the PDF itself is sent the
-- turn without that block (agent/models/capabilities.py), so it reads the PDF once, not
-- as text and as a document; every other model reads the block. NULL: the turn carries
-- none (a scan, or a PDF whose text did not fit the turn).
ALTER TABLE message_attachments ADD COLUMN in_turn text;

-- The text of each page the decoder read, in page order (a JSON array of strings, "" for
-- a page without text): whether a passage the model quotes is on the page it cites
-- (agent/rounds/citations.py). NULL: not read.
ALTER TABLE message_attachments ADD COLUMN page_texts jsonb;
