-- The hand-back from subtasks to their task in one round trip each (issue 16). Settling a
-- subtask was a transaction of five statements (lock the task row, settle, wake, notify,
-- commit), and a task starting to wait two; these functions do the same in one call.
--
-- They are PL/pgSQL, not one SQL statement, for the snapshots: the task row is locked
-- first, so a settle and a wait (or two settles) of one task serialise, and the wake-up
-- check that follows must see what the other committed while we waited for the lock. A
-- single statement reads with the snapshot it started with and would not; each statement
-- of a VOLATILE function takes a fresh one (READ COMMITTED), as the separate statements
-- of the old transaction did (storage/delegations.py).

-- Wake the task (queued again, and a NOTIFY on `channel`) when it waits and none of its
-- subtasks is unfinished. True when it was woken.
CREATE FUNCTION wake_waiting_task(task text, channel text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE tasks SET state = 'queued', run_after = now()
    WHERE id = task AND state = 'waiting'
      AND NOT EXISTS (SELECT 1 FROM subtasks s
                      WHERE s.task_id = task AND s.state IN ('queued', 'running'));
    IF FOUND THEN
        PERFORM pg_notify(channel, '');
    END IF;
    RETURN FOUND;
END
$$;

-- End a subtask's lease with its outcome, fenced by (attempt, owner), and wake its task
-- if it was the last to end. True when the fence held.
CREATE FUNCTION settle_subtask(
    task text, round integer, index integer, attempt integer, owner integer,
    outcome text, result text, channel text
) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    settled boolean;
BEGIN
    -- The task row first: `await_subtasks` changes it, so the two serialise.
    PERFORM 1 FROM tasks WHERE id = task FOR UPDATE;
    UPDATE subtasks s SET state = outcome, result = settle_subtask.result, finished_at = now(),
           lease_owner = NULL, lease_expires = NULL
    WHERE s.task_id = task AND s.round = settle_subtask.round AND s.index = settle_subtask.index
      AND s.attempts = attempt AND s.state = 'running' AND s.lease_owner = owner;
    settled := FOUND;
    PERFORM wake_waiting_task(task, channel);
    RETURN settled;
END
$$;

-- The task's attempt releases its lease to wait for its subtasks (fenced by attempt and
-- owner), and is woken at once if they have all ended already.
CREATE FUNCTION await_subtasks(task text, attempt integer, owner integer, channel text)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE tasks SET state = 'waiting', lease_owner = NULL, lease_expires = NULL
    WHERE id = task AND attempts = attempt AND state = 'running' AND lease_owner = owner;
    PERFORM wake_waiting_task(task, channel);
END
$$;
