-- What admission stores, and each limit rule, written once (storage/admission.py). Before,
-- the fast path's statement, the step-by-step path and a schedule's run each wrote the
-- session, the task and the turn their own way, and the limit rules were written twice:
-- in the admission's gate (counted) and in the look before downloads (not counted).
--
-- The pieces, each used by every path that needs it:
--   first_limit     the limit (or the channel's refusal) that applies first, by rank
--   admission_gate  the delivery, the hourly counters, the limits and the notice's claim
--   open_task       the session and the task
--   store_turn      a person's message (or a schedule's turn), its own anchor
--   store_notice    the over-limit notice, stored as the task's reply
--   admit_turn      the common case in one round trip: the gate, then the rest
--
-- PL/pgSQL where steps follow each other, for the snapshots (as in 013): each statement
-- sees what the one before it wrote (the counter just bumped, the session just made).

-- The limit that refuses a message first (rank order: the refusal of its channel, then
-- `storage.LIMIT_SCOPES`), with the key and window of its notice; no row when none does.
-- 0 means no limit. `p_uncounted` is 1 when this message is not in `admission_counts`
-- yet (the look before downloads) and 0 once the gate has counted it.
CREATE FUNCTION first_limit(
    p_user text, p_session text, p_channel text, p_workspace text, p_refused text,
    p_user_per_hour integer, p_thread_per_hour integer, p_user_tokens bigint,
    p_channel_tokens bigint, p_all_tokens bigint, p_channel_usd numeric,
    p_workspace_usd numeric, p_uncounted integer
) RETURNS TABLE (scope text, key text, window_start timestamptz)
LANGUAGE sql STABLE AS $$
    WITH w AS (
        SELECT date_trunc('hour', now(), 'UTC') AS hour, date_trunc('day', now(), 'UTC') AS day,
               (now() AT TIME ZONE 'UTC')::date AS today
    ), counts AS (
        SELECT c.scope, c.key, c.messages + p_uncounted AS messages
        FROM admission_counts c, w
        WHERE c.window_start = w.hour
          AND ((c.scope = 'user' AND c.key = p_user AND p_user_per_hour > 0)
               OR (c.scope = 'thread' AND c.key = p_session AND p_thread_per_hour > 0))
    ), spent AS (
        SELECT u.scope, u.key, u.input_tokens + u.output_tokens AS tokens, u.cost_usd AS usd
        FROM usage_daily u, w
        WHERE u.day = w.today
          AND ((u.scope = 'user' AND u.key = p_user AND p_user_tokens > 0)
               OR (u.scope = 'channel' AND u.key = p_channel
                   AND (p_channel_tokens > 0 OR p_channel_usd > 0))
               OR (u.scope = 'workspace' AND u.key = p_workspace AND p_workspace_usd > 0))
    )
    SELECT o.scope, o.key, o.window_start FROM (
        SELECT 0 AS rank, p_refused AS scope, p_session AS key, w.day AS window_start
        FROM w WHERE p_refused IS NOT NULL
        UNION ALL
        SELECT 1, 'user', counts.key, w.hour FROM counts, w
        WHERE counts.scope = 'user' AND counts.messages > p_user_per_hour
        UNION ALL
        SELECT 2, 'thread', counts.key, w.hour FROM counts, w
        WHERE counts.scope = 'thread' AND counts.messages > p_thread_per_hour
        UNION ALL
        SELECT 3, 'user_tokens', spent.key, w.day FROM spent, w
        WHERE spent.scope = 'user' AND spent.tokens >= p_user_tokens
        UNION ALL
        SELECT 4, 'channel_tokens', spent.key, w.day FROM spent, w
        WHERE spent.scope = 'channel' AND p_channel_tokens > 0
          AND spent.tokens >= p_channel_tokens
        UNION ALL
        SELECT 5, 'all_tokens', coalesce(p_user, p_channel, '*'), w.day FROM w, (
            SELECT sum(a.input_tokens + a.output_tokens) AS tokens FROM usage_daily a, w
            WHERE p_all_tokens > 0 AND a.scope = 'channel' AND a.day = w.today
        ) everyone WHERE everyone.tokens >= p_all_tokens
        UNION ALL
        SELECT 6, 'channel_spend', spent.key, w.day FROM spent, w
        WHERE spent.scope = 'channel' AND p_channel_usd > 0 AND spent.usd >= p_channel_usd
        UNION ALL
        SELECT 7, 'workspace_spend', spent.key, w.day FROM spent, w
        WHERE spent.scope = 'workspace' AND spent.usd >= p_workspace_usd
    ) o
    ORDER BY o.rank LIMIT 1
$$;

-- The gate of an admission: record the delivery, and unless it was seen before or the
-- message has its task already, count the message in its hour and look for a limit; an
-- over-limit message passes only when it claims its window's notice. `p_known_only`:
-- in a session new to us nothing passes and nothing is written, not even the delivery.
-- `known`: whether the session existed before.
CREATE FUNCTION admission_gate(
    p_event text, p_task text, p_user text, p_session text, p_channel text,
    p_workspace text, p_refused text, p_user_per_hour integer, p_thread_per_hour integer,
    p_user_tokens bigint, p_channel_tokens bigint, p_all_tokens bigint,
    p_channel_usd numeric, p_workspace_usd numeric, p_known_only boolean
) RETURNS TABLE (passed boolean, limited text, noticed boolean, known boolean)
LANGUAGE plpgsql AS $$
DECLARE
    over record;
BEGIN
    passed := false;
    noticed := false;
    known := EXISTS (SELECT 1 FROM sessions s WHERE s.id = p_session);
    IF p_known_only AND NOT known THEN
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_event IS NOT NULL THEN
        INSERT INTO seen_events (event_id) VALUES (p_event) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM tasks t WHERE t.id = p_task) THEN
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO admission_counts AS a (scope, key, window_start, messages)
    SELECT c.scope, c.key, date_trunc('hour', now(), 'UTC'), 1
    FROM (VALUES ('user', p_user, p_user_per_hour), ('thread', p_session, p_thread_per_hour))
         AS c (scope, key, cap)
    WHERE c.key IS NOT NULL AND c.cap > 0
    ON CONFLICT (scope, key, window_start) DO UPDATE SET messages = a.messages + 1;
    SELECT * INTO over FROM first_limit(
        p_user, p_session, p_channel, p_workspace, p_refused, p_user_per_hour,
        p_thread_per_hour, p_user_tokens, p_channel_tokens, p_all_tokens, p_channel_usd,
        p_workspace_usd, 0);
    IF over.scope IS NULL THEN
        passed := true;
        RETURN NEXT;
        RETURN;
    END IF;
    limited := over.scope;
    INSERT INTO limit_notices (scope, key, window_start, task_id)
    VALUES (over.scope, over.key, over.window_start, p_task) ON CONFLICT DO NOTHING;
    noticed := FOUND;
    passed := FOUND;
    RETURN NEXT;
END
$$;

-- The session (unless it exists) and the task; true when the task is new. A schedule's
-- run names its schedule (`p_schedule`); a person's message its trace.
CREATE FUNCTION open_task(
    p_session text, p_task text, p_address jsonb, p_user text, p_channel text,
    p_traceparent text, p_schedule bigint
) RETURNS boolean LANGUAGE sql AS $$
    WITH ses AS (
        INSERT INTO sessions (id) VALUES (p_session) ON CONFLICT DO NOTHING
    ), task AS (
        INSERT INTO tasks (id, session_id, address, user_id, channel, traceparent, schedule_id)
        VALUES (p_task, p_session, p_address, p_user, p_channel, p_traceparent, p_schedule)
        ON CONFLICT DO NOTHING
        RETURNING true AS created
    )
    SELECT EXISTS (SELECT 1 FROM task)
$$;

-- A turn (a person's message, back-filled or not, or a schedule's), its own anchor;
-- `p_note` says what of its pictures was not kept (storage/pictures.py), appended to the
-- text and kept beside it. Its sequence number; NULL when it was stored before.
CREATE FUNCTION store_turn(p_id text, p_session text, p_text text, p_note text)
RETURNS bigint LANGUAGE sql AS $$
    WITH s AS (SELECT nextval(pg_get_serial_sequence('messages', 'seq')) AS seq)
    INSERT INTO messages (seq, id, session_id, anchor, role, kind, text, pictures_note)
    SELECT s.seq, p_id, p_session, s.seq, 'user', 'turn', p_text || coalesce(p_note, ''), p_note
    FROM s
    ON CONFLICT (id) DO NOTHING
    RETURNING seq
$$;

-- The notice of the limit `p_scope` (its text from `p_notices`, else `p_fallback`), stored
-- as the task's reply to its turn `p_turn`: the runner posts it without asking a model.
CREATE FUNCTION store_notice(
    p_reply text, p_session text, p_turn text, p_scope text, p_notices jsonb, p_fallback text
) RETURNS void LANGUAGE sql AS $$
    INSERT INTO messages (id, session_id, anchor, role, kind, text)
    SELECT p_reply, p_session, m.seq, 'assistant', 'reply', coalesce(p_notices ->> p_scope, p_fallback)
    FROM messages m WHERE m.id = p_turn
    ON CONFLICT (id) DO NOTHING
$$;

-- The common case (no pictures, no back-fill) in one round trip: the gate, the session,
-- the task, the turn, the notice when this message claimed one, and the NOTIFY on
-- `p_wake` that wakes a worker once the transaction commits.
CREATE FUNCTION admit_turn(
    p_event text, p_task text, p_user text, p_session text, p_channel text,
    p_workspace text, p_refused text, p_user_per_hour integer, p_thread_per_hour integer,
    p_user_tokens bigint, p_channel_tokens bigint, p_all_tokens bigint,
    p_channel_usd numeric, p_workspace_usd numeric, p_known_only boolean,
    p_address jsonb, p_traceparent text, p_turn text, p_text text, p_reply text,
    p_notices jsonb, p_fallback text, p_wake text
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
        PERFORM store_turn(p_turn, p_session, p_text, NULL);
        IF noticed THEN
            PERFORM store_notice(p_reply, p_session, p_turn, limited, p_notices, p_fallback);
        END IF;
        PERFORM pg_notify(p_wake, '');
    END IF;
    RETURN NEXT;
END
$$;
