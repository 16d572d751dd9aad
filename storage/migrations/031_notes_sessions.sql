-- Issue 47, items 5 and 9.

-- `threadgate sessions clear` is recorded like a reset: who cleared a session's history,
-- when and why (storage/sessions.py). A deleted session takes its audit rows with it.
ALTER TABLE session_interventions DROP CONSTRAINT session_interventions_action_check;
ALTER TABLE session_interventions ADD CONSTRAINT session_interventions_action_check
    CHECK (action IN ('reset', 'clear'));

-- What the host says of a message — a picture not kept, an attachment a provider refused —
-- is kept beside its text, never in it (agent/core/notes.py, storage/notes.py): a JSON list
-- of {"source", "text"}. Before, such notes were appended to a person's stored turn (and
-- copied into `pictures_note` so an edit could append them again), and a deleted turn's
-- text was replaced by the tombstone. Each stored note moves out of the text into the
-- list, typed by what it says; a deleted turn keeps no text (`deleted_at` says it).
ALTER TABLE messages ADD COLUMN notes jsonb;

UPDATE messages m SET
    text = left(m.text, length(m.text) - length(m.pictures_note)),
    notes = (
        SELECT jsonb_agg(jsonb_build_object(
                   'source', CASE WHEN found[1] LIKE 'Not kept%' THEN 'attachment_not_kept'
                                  ELSE 'attachment_refused' END,
                   'text', found[1]) ORDER BY n)
        FROM regexp_matches(m.pictures_note, '<runtime>(.*?)</runtime>', 'g')
             WITH ORDINALITY AS f (found, n)
    )
WHERE m.pictures_note IS NOT NULL AND m.pictures_note <> ''
  AND right(m.text, length(m.pictures_note)) = m.pictures_note;

UPDATE messages SET text = '' WHERE deleted_at IS NOT NULL;

ALTER TABLE messages DROP COLUMN pictures_note;

-- A turn and the notes on what of its pictures was not kept, apart (024's took the note
-- as text and appended it).
DROP FUNCTION store_turn(text, text, text, text);
CREATE FUNCTION store_turn(p_id text, p_session text, p_text text, p_notes jsonb)
RETURNS bigint LANGUAGE sql AS $$
    WITH s AS (SELECT nextval(pg_get_serial_sequence('messages', 'seq')) AS seq)
    INSERT INTO messages (seq, id, session_id, anchor, role, kind, text, notes)
    SELECT s.seq, p_id, p_session, s.seq, 'user', 'turn', p_text, p_notes
    FROM s
    ON CONFLICT (id) DO NOTHING
    RETURNING seq
$$;
