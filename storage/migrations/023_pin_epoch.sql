-- A session's prompt epoch pinned in one round trip (issue 36). Before, a session's first
-- task read its pin, then locked the session in a transaction of four more round trips
-- (lock, read again, store and begin, commit), each waiting its turn on a busy event loop
-- before the model request could go; every new thread paid them. This function does the
-- same steps on the server, each statement seeing what was committed before it ran (READ
-- COMMITTED), so what another replica began while we waited for the lock is agreed with.
--
-- It answers one row: the epoch the session is asked under and what happened:
--   kept       the pinned epoch offers what `offer_hash` offers (read without a lock);
--              its text is NULL when it is the caller's own epoch (the caller has it)
--   begun      the caller's epoch is now the session's next, numbered, with a reason
--   agreed     another replica began an epoch that offers the same meanwhile (its text
--              NULL when it is the caller's own)
--   no_session there is no such session (a console or test task): use the caller's
--   unstored   the caller sent no text (it believed the epoch stored) and it is not:
--              call again with the text
-- Begin an epoch as the session's next one, its row locked by the caller: store it unless
-- stored (no text: the caller knows it is), make it the session's current epoch, number
-- it, say why; the number. `pin_epoch` below and a compaction's transaction
-- (storage/summaries.py, through storage/memory.py's `begin_epoch`) both begin epochs so.
CREATE FUNCTION begin_epoch(
    p_session text, p_hash text, p_version text, p_text text, p_offer text,
    p_offer_hash text, p_tools text[], p_subagents jsonb, p_reason text
) RETURNS integer LANGUAGE sql AS $$
    WITH stored AS (
        INSERT INTO prompt_epochs (hash, version, text, offer, offer_hash, tools, subagents)
        SELECT p_hash, p_version, p_text, p_offer, p_offer_hash, p_tools, p_subagents
        WHERE p_text IS NOT NULL
        ON CONFLICT (hash) DO NOTHING
    ), pinned AS (
        UPDATE sessions SET prompt_epoch = p_hash WHERE id = p_session
    )
    INSERT INTO session_epochs (session_id, number, epoch, reason)
    SELECT p_session, coalesce(max(number), 0) + 1, p_hash, p_reason
    FROM session_epochs WHERE session_id = p_session
    RETURNING number
$$;

CREATE FUNCTION pin_epoch(
    p_session text, p_hash text, p_version text, p_text text, p_offer text,
    p_offer_hash text, p_tools text[], p_subagents jsonb
) RETURNS TABLE (
    out_hash text, out_version text, out_text text, out_offer_hash text,
    out_tools text[], out_subagents jsonb, out_outcome text
) LANGUAGE plpgsql AS $$
DECLARE
    pinned text;
    found_epoch prompt_epochs%ROWTYPE;
    why text;
BEGIN
    SELECT e.* INTO found_epoch
    FROM sessions s JOIN prompt_epochs e ON e.hash = s.prompt_epoch WHERE s.id = p_session;
    IF found_epoch.hash IS NOT NULL AND found_epoch.offer_hash IS NOT DISTINCT FROM p_offer_hash THEN
        RETURN QUERY SELECT found_epoch.hash, found_epoch.version,
            CASE WHEN found_epoch.hash = p_hash THEN NULL ELSE found_epoch.text END,
            found_epoch.offer_hash, found_epoch.tools, found_epoch.subagents, 'kept'::text;
        RETURN;
    END IF;
    SELECT s.prompt_epoch INTO pinned FROM sessions s WHERE s.id = p_session FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT NULL::text, NULL::text, NULL::text, NULL::text, NULL::text[],
            NULL::jsonb, 'no_session'::text;
        RETURN;
    END IF;
    found_epoch := NULL;
    SELECT e.* INTO found_epoch FROM prompt_epochs e WHERE e.hash = pinned;
    IF found_epoch.hash IS NOT NULL AND found_epoch.offer_hash IS NOT DISTINCT FROM p_offer_hash THEN
        RETURN QUERY SELECT found_epoch.hash, found_epoch.version,
            CASE WHEN found_epoch.hash = p_hash THEN NULL ELSE found_epoch.text END,
            found_epoch.offer_hash, found_epoch.tools, found_epoch.subagents, 'agreed'::text;
        RETURN;
    END IF;
    IF found_epoch.hash IS NOT NULL THEN
        why := 'offer_changed';
    ELSIF EXISTS (SELECT 1 FROM session_epochs se WHERE se.session_id = p_session)
       OR EXISTS (SELECT 1 FROM session_interventions si
                  WHERE si.session_id = p_session AND si.action = 'reset') THEN
        why := 'reset';
    ELSE
        why := 'start';
    END IF;
    IF p_text IS NULL AND NOT EXISTS (SELECT 1 FROM prompt_epochs e WHERE e.hash = p_hash) THEN
        RETURN QUERY SELECT NULL::text, NULL::text, NULL::text, NULL::text,
            NULL::text[], NULL::jsonb, 'unstored'::text;
        RETURN;
    END IF;
    PERFORM begin_epoch(p_session, p_hash, p_version, p_text, p_offer, p_offer_hash,
                        p_tools, p_subagents, why);
    RETURN QUERY SELECT p_hash, p_version, NULL::text, p_offer_hash, p_tools,
        p_subagents, 'begun'::text;
END
$$;
