-- The people in the thread steer the agent (issue 31): approval before a tool acts
-- (storage/approvals.py, agent/core/approval.py) and feedback on replies (storage/feedback.py).

-- A round paused at a step whose tool calls need a person: the task's `number`-th pause, in
-- round `round`, with the round so far as the agent wrote it (agent/rounds/pause.py).
CREATE TABLE round_pauses (
    task_id     text NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    number      integer NOT NULL,
    round       integer NOT NULL,
    state       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, number)
);

-- One tool call waiting for a person. `id` is agent.core.ids' `task:{id}:approval:{p}:{i}`,
-- also the outbox id of the message that asks. `decision` stays null until someone decides
-- or the deadline passes ('timed_out'); `run_state` records the one run of an approved call:
-- 'running' from just before it starts, then how it ended, with its output.
CREATE TABLE tool_approvals (
    id            text PRIMARY KEY,
    task_id       text NOT NULL,
    pause         integer NOT NULL,
    index         integer NOT NULL,
    call_id       text NOT NULL,
    tool          text NOT NULL,
    arguments     text NOT NULL,
    requested_at  timestamptz NOT NULL DEFAULT now(),
    deadline      timestamptz NOT NULL,
    decision      text CHECK (decision IN ('approved', 'denied', 'timed_out')),
    decided_by    text,
    decided_at    timestamptz,
    run_state     text CHECK (run_state IN ('running', 'ok', 'error')),
    output        text,
    UNIQUE (task_id, pause, index),
    FOREIGN KEY (task_id, pause) REFERENCES round_pauses (task_id, number) ON DELETE CASCADE
);
CREATE INDEX tool_approvals_undecided ON tool_approvals (task_id) WHERE decision IS NULL;

-- Whether the task waits for a person: a request of it undecided and not yet overdue. An
-- overdue one makes the task runnable (the claim's recovery look finds it, storage/queue.py),
-- and its run decides it as timed out.
CREATE FUNCTION waits_for_people(task text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM tool_approvals a
                   WHERE a.task_id = task AND a.decision IS NULL AND a.deadline > now())
$$;

-- As in 013, and a task waiting for people stays waiting too: a waiting task wakes when
-- none of its subtasks is unfinished and no person is still to decide.
CREATE OR REPLACE FUNCTION wake_waiting_task(task text, channel text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE tasks SET state = 'queued', run_after = now()
    WHERE id = task AND state = 'waiting'
      AND NOT EXISTS (SELECT 1 FROM subtasks s
                      WHERE s.task_id = task AND s.state IN ('queued', 'running'))
      AND NOT waits_for_people(task);
    IF FOUND THEN
        PERFORM pg_notify(channel, '');
    END IF;
    RETURN FOUND;
END
$$;

-- A person's decision, unless the request was decided already or its task has ended; past
-- its deadline it is decided as timed out instead. The task row is locked first, as by
-- `await_subtasks` (013), which a waiting task's release calls: a decision and the task
-- starting to wait serialise, and whichever comes second wakes it. True when this call
-- recorded `verdict`.
CREATE FUNCTION decide_approval(approval text, verdict text, who text, channel text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    owner_task text;
    recorded text;
BEGIN
    SELECT a.task_id INTO owner_task FROM tool_approvals a WHERE a.id = approval;
    IF owner_task IS NULL THEN
        RETURN false;
    END IF;
    PERFORM 1 FROM tasks t WHERE t.id = owner_task FOR UPDATE;
    UPDATE tool_approvals a
    SET decision = CASE WHEN a.deadline > now() THEN verdict ELSE 'timed_out' END,
        decided_by = CASE WHEN a.deadline > now() THEN who END,
        decided_at = now()
    WHERE a.id = approval AND a.decision IS NULL
      AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = owner_task
                  AND t.state IN ('queued', 'running', 'waiting'))
    RETURNING a.decision INTO recorded;
    PERFORM wake_waiting_task(owner_task, channel);
    RETURN recorded IS NOT DISTINCT FROM verdict;
END
$$;

-- A person's vote on a reply: one row per reply and person (a second click changes the
-- vote), with the reply's prompt epoch and route copied when the vote is cast, so the report
-- (`threadgate feedback`) reads one table. Gone with its reply.
CREATE TABLE reply_feedback (
    message_id      text NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    user_id         text NOT NULL,
    value           text NOT NULL CHECK (value IN ('positive', 'negative')),
    prompt_epoch    text,
    route_provider  text,
    route_model     text,
    route_slot      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, user_id)
);
