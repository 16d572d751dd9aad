-- Issue 48: fewer statements per answered event.

-- An admission's NOTIFY names the thread its task is in (`storage.database.admitted_to`):
-- a finish in that thread that hears it while it runs wakes a worker for it, and one in
-- another thread does not (`Database.heard_for`); a worker no longer looks for work after
-- every task (agent/durable/runner.py).
--
-- `admit_thread_turn` is `admit_turn` with the thread's earlier messages (a back-fill
-- without pictures: `p_earlier_ids`, `p_earlier_texts`, oldest first) stored before the
-- turn, and the turn's runtime notes (`p_notes`: a channel's context, a gap in what was
-- read), in the one round trip: a new thread's first mention took seven (begin, the gate,
-- the task, the turns, the notify, commit). `admit_turn` stays, for a replica of the
-- version before during a rolling deploy, as the same with neither.

CREATE FUNCTION admit_thread_turn(
    p_event text, p_task text, p_user text, p_session text, p_channel text,
    p_workspace text, p_refused text, p_user_per_hour integer, p_thread_per_hour integer,
    p_user_tokens bigint, p_channel_tokens bigint, p_all_tokens bigint,
    p_channel_usd numeric, p_workspace_usd numeric, p_known_only boolean,
    p_address jsonb, p_traceparent text, p_turn text, p_text text, p_reply text,
    p_notices jsonb, p_fallback text, p_wake text, p_earlier_ids text[], p_earlier_texts text[],
    p_notes jsonb
) RETURNS TABLE (created boolean, limited text, noticed boolean, known boolean)
LANGUAGE plpgsql AS $$
DECLARE
    gate record;
BEGIN
    SELECT * INTO gate FROM admission_gate(
        p_event, p_task, p_user, p_session, p_channel, p_workspace, p_refused,
        p_user_per_hour, p_thread_per_hour, p_user_tokens, p_channel_tokens, p_all_tokens,
        p_channel_usd, p_workspace_usd, p_known_only);
    limited := gate.limited;
    noticed := gate.noticed;
    known := gate.known;
    created := false;
    IF gate.passed THEN
        created := open_task(p_session, p_task, p_address, p_user, p_channel, p_traceparent, NULL);
    END IF;
    IF created THEN
        IF NOT noticed THEN  -- a notice's task is read by no model
            PERFORM store_turn(m.id, p_session, m.text, NULL)
            FROM unnest(p_earlier_ids, p_earlier_texts) WITH ORDINALITY AS m (id, text, n)
            ORDER BY m.n;
        END IF;
        PERFORM store_turn(p_turn, p_session, p_text, p_notes);
        IF noticed THEN
            PERFORM store_notice(p_reply, p_session, p_turn, limited, p_notices, p_fallback);
        END IF;
        PERFORM pg_notify(p_wake, 'admitted:' || p_session);
    END IF;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE FUNCTION admit_turn(
    p_event text, p_task text, p_user text, p_session text, p_channel text,
    p_workspace text, p_refused text, p_user_per_hour integer, p_thread_per_hour integer,
    p_user_tokens bigint, p_channel_tokens bigint, p_all_tokens bigint,
    p_channel_usd numeric, p_workspace_usd numeric, p_known_only boolean,
    p_address jsonb, p_traceparent text, p_turn text, p_text text, p_reply text,
    p_notices jsonb, p_fallback text, p_wake text
) RETURNS TABLE (created boolean, limited text, noticed boolean, known boolean)
LANGUAGE sql AS $$
    SELECT * FROM admit_thread_turn(
        p_event, p_task, p_user, p_session, p_channel, p_workspace, p_refused,
        p_user_per_hour, p_thread_per_hour, p_user_tokens, p_channel_tokens, p_all_tokens,
        p_channel_usd, p_workspace_usd, p_known_only, p_address, p_traceparent, p_turn,
        p_text, p_reply, p_notices, p_fallback, p_wake, '{}', '{}', NULL)
$$;
