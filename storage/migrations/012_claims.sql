-- Cheaper claims (issue 16). A claim used to walk every open task in seq order and ask
-- pg_locks, once per running task, whether its lease owner was alive: with 16 workers busy
-- that was ~1,000 buffer reads and most of Postgres's CPU per answered event. Claims now
-- look at queued rows first, through these indexes, and look for dead leases (with one
-- pg_locks read per statement, `live_lease_owners`) only when nothing is queued or when the
-- process's periodic recovery look is due (storage/queue.py).
CREATE INDEX tasks_queued ON tasks (seq) WHERE state = 'queued';
CREATE INDEX subtasks_queued ON subtasks (created_at, index) WHERE state = 'queued';

-- The owners whose advisory lock is held now: the live processes (storage/database.py).
CREATE FUNCTION live_lease_owners() RETURNS SETOF oid
LANGUAGE sql STABLE AS $$
    SELECT l.objid FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = x'74676C73'::integer::oid
$$;
