-- Schedules people make, confirmed and bounded (issue 44): storage/schedule_consent.py,
-- storage/schedules.py.
--
-- A schedule a person's conversation asks for (`schedule_create`) is stored 'pending' and
-- runs only once its owner approves it: until `approval_deadline` they may click Approve
-- (it becomes 'active') or Deny ('denied'); past it, a pending schedule has lapsed (it is
-- neither run nor counted, and a late click denies it). Who asked and from which message
-- is kept with it: the task whose round asked, and that message's channel and ts.
ALTER TABLE schedules DROP CONSTRAINT schedules_state_check;
ALTER TABLE schedules ADD CONSTRAINT schedules_state_check
    CHECK (state IN ('pending', 'active', 'paused', 'done', 'denied'));
ALTER TABLE schedules
    ADD COLUMN asked_task        text,
    ADD COLUMN asked_channel     text,
    ADD COLUMN asked_ts          text,
    ADD COLUMN approval_deadline timestamptz,
    ADD COLUMN decided_by        text,
    ADD COLUMN decided_at        timestamptz;
-- What the caps count: a person's schedules, and people's in a channel, active or pending.
CREATE INDEX schedules_counted_channel ON schedules (team, channel)
    WHERE owner IS NOT NULL AND state IN ('pending', 'active');
-- A retried round that asks again finds the schedule its first try stored.
CREATE INDEX schedules_asked_task ON schedules (asked_task) WHERE asked_task IS NOT NULL;

-- What a scheduled run is expected to spend (its schedule's largest recent run, or the
-- caller's assumption for a schedule that never ran), held against its budgets while it is
-- in flight. NULL on runs fired before this migration: the assumption stands for them.
ALTER TABLE tasks ADD COLUMN hold_tokens bigint, ADD COLUMN hold_usd numeric;
CREATE INDEX tasks_schedule_in_flight ON tasks (schedule_id)
    WHERE schedule_id IS NOT NULL AND state IN ('queued', 'running', 'waiting');

-- The gate of a scheduled run, asked in the transaction that fires it (before its task is
-- stored). It holds a run to the same limits as a person's message, with first_limit
-- (migration 024): its owner's hour and its thread's (a person's schedule only: the
-- caller passes 0 for an operator's), the daily tokens of its owner, its channel and
-- every workspace, and the spend of its channel and its workspace.
--
-- Runs that fire together would all pass before any has spent, so each run in flight
-- counts against its budgets as what it is expected to spend (`hold_*`: the largest of
-- its schedule's last three finished runs; for a schedule that never ran,
-- `p_unknown_tokens` and `p_unknown_usd`), and a run waits while those in flight and
-- itself could go past a budget. A run that waits is fired on a later look, once runs in
-- flight are done; with none in flight a run goes as a person's message would (past a
-- budget by at most what it spends). The budgets' keys are locked first (advisory, in
-- one order), so two replicas firing at once take turns, and the second sees the first's
-- run.
--
-- `limited`: the limit that refuses it (not counted); `waits`: look again later; neither:
-- it passed, and it is counted in its hour like a message. `hold_*`: what it is expected
-- to spend, for its task.
CREATE FUNCTION schedule_gate(
    p_schedule bigint, p_user text, p_session text, p_channel text, p_workspace text,
    p_user_per_hour integer, p_thread_per_hour integer, p_user_tokens bigint,
    p_channel_tokens bigint, p_all_tokens bigint, p_channel_usd numeric,
    p_workspace_usd numeric, p_unknown_tokens bigint, p_unknown_usd numeric
) RETURNS TABLE (limited text, waits boolean, hold_tokens bigint, hold_usd numeric)
LANGUAGE plpgsql AS $$
DECLARE
    budget_key text;
    over record;
BEGIN
    waits := false;
    FOR budget_key IN
        SELECT k FROM (VALUES ('user:' || p_user, p_user_tokens > 0),
                              ('channel:' || p_channel, p_channel_tokens > 0 OR p_channel_usd > 0),
                              ('workspace:' || p_workspace, p_workspace_usd > 0),
                              ('all', p_all_tokens > 0)) AS b (k, budgeted)
        WHERE b.budgeted AND b.k IS NOT NULL ORDER BY b.k
    LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('threadgate budget ' || budget_key, 0));
    END LOOP;
    SELECT * INTO over FROM first_limit(
        p_user, p_session, p_channel, p_workspace, NULL, p_user_per_hour, p_thread_per_hour,
        p_user_tokens, p_channel_tokens, p_all_tokens, p_channel_usd, p_workspace_usd, 1);
    IF over.scope IS NOT NULL THEN
        limited := over.scope;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT coalesce(max(r.tokens), p_unknown_tokens), coalesce(max(r.usd), p_unknown_usd)
    INTO hold_tokens, hold_usd
    FROM (
        SELECT coalesce(sum(m.input_tokens + m.output_tokens), 0) AS tokens,
               coalesce(sum(m.cost_usd), 0) AS usd
        FROM (SELECT t.id FROM tasks t
              WHERE t.schedule_id = p_schedule AND t.state NOT IN ('queued', 'running', 'waiting')
              ORDER BY t.seq DESC LIMIT 3) done
        LEFT JOIN model_usage m ON m.task_id = done.id
        GROUP BY done.id
    ) r;
    waits := EXISTS (
        SELECT 1
        FROM (VALUES ('user', p_user, p_user_tokens::numeric, hold_tokens::numeric, true),
                     ('channel', p_channel, p_channel_tokens::numeric, hold_tokens::numeric, true),
                     ('channel', p_channel, p_channel_usd, hold_usd, false),
                     ('workspace', p_workspace, p_workspace_usd, hold_usd, false),
                     ('all', '*', p_all_tokens::numeric, hold_tokens::numeric, true))
             AS b (scope, key, budget, own, tokens)
        CROSS JOIN LATERAL (
            SELECT count(*) AS n,
                   coalesce(sum(CASE WHEN b.tokens THEN coalesce(t.hold_tokens, p_unknown_tokens)
                                     ELSE coalesce(t.hold_usd, p_unknown_usd) END), 0) AS held
            FROM tasks t
            WHERE t.schedule_id IS NOT NULL AND t.state IN ('queued', 'running', 'waiting')
              AND CASE b.scope WHEN 'user' THEN t.user_id = b.key
                               WHEN 'channel' THEN t.channel = b.key
                               WHEN 'workspace' THEN t.address ->> 'team' = b.key
                               ELSE true END
        ) flying
        CROSS JOIN LATERAL (
            SELECT coalesce(sum(CASE WHEN b.tokens THEN (u.input_tokens + u.output_tokens)::numeric
                                     ELSE u.cost_usd END), 0) AS spent
            FROM usage_daily u
            WHERE u.day = (now() AT TIME ZONE 'UTC')::date
              AND CASE b.scope WHEN 'all' THEN u.scope = 'channel'
                               ELSE u.scope = b.scope AND u.key = b.key END
        ) today
        WHERE b.key IS NOT NULL AND b.budget > 0 AND flying.n > 0
          AND today.spent + flying.held + b.own > b.budget
    );
    IF NOT waits THEN
        INSERT INTO admission_counts AS a (scope, key, window_start, messages)
        SELECT c.scope, c.key, date_trunc('hour', now(), 'UTC'), 1
        FROM (VALUES ('user', p_user, p_user_per_hour), ('thread', p_session, p_thread_per_hour))
             AS c (scope, key, cap)
        WHERE c.key IS NOT NULL AND c.cap > 0
        ON CONFLICT (scope, key, window_start) DO UPDATE SET messages = a.messages + 1;
    END IF;
    RETURN NEXT;
END
$$;
