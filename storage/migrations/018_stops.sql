-- People stop the work in their thread with Slack's Stop button (issue 31, item 1).

-- When someone stopped the task and who. A stopped task that was working is queued again,
-- runnable at once, so that a worker on any replica (a restarted one too) claims it, says
-- once that the work was stopped and ends it 'cancelled' (storage/stops.py); its lease
-- and its subtasks end with the stop, as an operator's cancel ends them.
ALTER TABLE tasks ADD COLUMN stopped_at timestamptz;
ALTER TABLE tasks ADD COLUMN stopped_by text;

-- A stop is recorded like an operator's cancel, with the Slack user as its actor.
ALTER TABLE task_interventions DROP CONSTRAINT task_interventions_action_check;
ALTER TABLE task_interventions ADD CONSTRAINT task_interventions_action_check
    CHECK (action IN ('cancel', 'retry', 'stop'));

-- A stop names its thread by Slack address (a DM's threads share one session): the open
-- tasks of a thread, found without reading every open task.
CREATE INDEX tasks_open_threads ON tasks ((address->>'channel'), (address->>'thread_ts'))
    WHERE state IN ('queued', 'running', 'waiting');
