-- Delegation: a task may wait for subtasks between rounds.
ALTER TABLE tasks DROP CONSTRAINT tasks_state_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_state_check
    CHECK (state IN ('queued', 'running', 'waiting', 'done', 'failed'));
DROP INDEX tasks_open;
CREATE INDEX tasks_open ON tasks (session_id, seq) WHERE state IN ('queued', 'running', 'waiting');
DROP INDEX tasks_runnable;
CREATE INDEX tasks_runnable ON tasks (seq) WHERE state IN ('queued', 'running', 'waiting');

-- A delegating round: the delegate call as the model made it, and the acknowledgment.
CREATE TABLE task_rounds (
    task_id         text NOT NULL REFERENCES tasks (id),
    number          integer NOT NULL,
    call_id         text NOT NULL,
    raw_arguments   text NOT NULL,
    acknowledgment  text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, number)
);

-- Each subtask is a leased row of its own, so subtasks run in parallel anywhere.
CREATE TABLE subtasks (
    task_id        text NOT NULL,
    round          integer NOT NULL,
    index          integer NOT NULL,
    type           text NOT NULL,
    params         jsonb NOT NULL,
    refs           jsonb NOT NULL DEFAULT '[]',
    state          text NOT NULL DEFAULT 'queued'
                   CHECK (state IN ('queued', 'running', 'done', 'failed', 'timed_out')),
    attempts       integer NOT NULL DEFAULT 0,
    run_after      timestamptz NOT NULL DEFAULT now(),
    deadline       timestamptz NOT NULL,
    lease_pid      integer,
    lease_backend  timestamptz,
    lease_expires  timestamptz,
    result         text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,
    PRIMARY KEY (task_id, round, index),
    FOREIGN KEY (task_id, round) REFERENCES task_rounds (task_id, number)
);
CREATE INDEX subtasks_open ON subtasks (created_at) WHERE state IN ('queued', 'running');
CREATE INDEX subtasks_unfinished ON subtasks (task_id) WHERE state IN ('queued', 'running');
