-- Issue 49 item 3: a thread never waits behind an outage (storage/model_waits.py).

-- A task queued again because every model was unavailable (`waits_for_models`) is tried at
-- once when a model answers again or a new message arrives in its thread, instead of at its
-- backed-off `run_after`; `model_wakes` counts those early tries (they do not use up the
-- planned ones, up to a bound: agent/durable/runner.py). `told_models_down`: its give-up
-- notice told its thread that the models are unavailable, which covers the thread's later
-- messages that arrived before it (one notice per thread per outage).
ALTER TABLE tasks
    ADD COLUMN waits_for_models boolean NOT NULL DEFAULT false,
    ADD COLUMN model_wakes integer NOT NULL DEFAULT 0,
    ADD COLUMN told_models_down boolean NOT NULL DEFAULT false;

-- Both stay tiny: only tasks waiting now, only give-ups for the models.
CREATE INDEX tasks_waiting_for_models ON tasks (session_id)
    WHERE waits_for_models AND state = 'queued';
CREATE INDEX tasks_told_models_down ON tasks (session_id, finished_at) WHERE told_models_down;

-- A new message in a thread (every task is opened by an INSERT: admission's `open_task`,
-- a schedule's run) makes the thread's task that waits for the models runnable now. A
-- trigger, so no path that opens a task can forget it, and no admission pays a round trip
-- for it: one probe of the partial index above, almost always empty.
CREATE FUNCTION try_waiting_task_now() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE tasks SET run_after = now(), model_wakes = model_wakes + 1
    WHERE session_id = NEW.session_id AND waits_for_models AND state = 'queued'
      AND run_after > now() AND id <> NEW.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_try_waiting_now AFTER INSERT ON tasks
    FOR EACH ROW EXECUTE FUNCTION try_waiting_task_now();
