-- Operators steer tasks (`threadgate tasks cancel|retry`, issue 14).

-- A task an operator stopped. It is finished like a done or failed one: never claimed again,
-- and its thread's next message runs.
ALTER TABLE tasks DROP CONSTRAINT tasks_state_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_state_check
    CHECK (state IN ('queued', 'running', 'waiting', 'done', 'failed', 'cancelled'));

-- When an operator last retried the task: its time limits count from here, not from its
-- message's arrival (a retry a day later must not time out at once).
ALTER TABLE tasks ADD COLUMN restarted_at timestamptz;

-- Who cancelled or retried a task, when, why, and from which state; `tasks show` says it.
CREATE TABLE task_interventions (
    id          bigserial PRIMARY KEY,
    task_id     text NOT NULL REFERENCES tasks (id),
    action      text NOT NULL CHECK (action IN ('cancel', 'retry')),
    actor       text NOT NULL,
    reason      text,
    from_state  text NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_interventions_task ON task_interventions (task_id, id);
