-- Messages that arrive while a thread's task works are answered together (issue 49, items
-- 1 and 2): storage/thread_queue.py, storage/queue.py.
--
-- A task that is claimed in a thread whose queue mode collects (`collect`, `steer`,
-- `interrupt`) takes over the later queued tasks of its session in the transaction of the
-- claim: each becomes 'covered', pointing at the task that answers it (`covered_by`), and
-- its turn becomes a turn of that task's request. A covered task has ended for the queue
-- (it is never claimed) but not for the person: its answer is its coverer's. A Stop of the
-- coverer cancels the covered tasks of the presser and gives back the others (queued
-- again), so each message is still answered once (storage/stops.py).
ALTER TABLE tasks DROP CONSTRAINT tasks_state_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_state_check
    CHECK (state IN ('queued', 'running', 'waiting', 'done', 'failed', 'cancelled', 'covered'));
ALTER TABLE tasks ADD COLUMN covered_by text REFERENCES tasks (id) ON DELETE SET NULL;
CREATE INDEX tasks_covered_by ON tasks (covered_by) WHERE covered_by IS NOT NULL;

-- A new message of the asker interrupted the task (`interrupt`): its lease ended as a
-- Stop ends one, and it was queued again to answer with everything pending. Recorded like
-- a stop, with the asker as actor.
ALTER TABLE tasks ADD COLUMN interrupted_at timestamptz;
ALTER TABLE task_interventions DROP CONSTRAINT task_interventions_action_check;
ALTER TABLE task_interventions ADD CONSTRAINT task_interventions_action_check
    CHECK (action IN ('cancel', 'retry', 'stop', 'interrupt'));

-- A covered task forgets its action token as an ended one does (migration 026): its
-- coverer searches with its own.
DROP TRIGGER tasks_forget_action_token ON tasks;
CREATE TRIGGER tasks_forget_action_token
AFTER UPDATE OF state ON tasks
FOR EACH ROW
WHEN (NEW.state IN ('done', 'failed', 'cancelled', 'covered')
      AND OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION forget_action_token();
