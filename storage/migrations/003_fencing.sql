-- Fencing: leases belong to a live owner, and a post remembers who claimed it and until when.

-- A lease's owner is a number the process's signal connection holds a session-level
-- advisory lock on (key space x'74676C73', "tgls"; storage/database.py takes it), not the
-- backend's pid and start time: pg_stat_activity hides other roles' backends from a role
-- without pg_read_all_stats, so a replica under another role took every live lease for a
-- dead one. pg_locks shows every lock to everyone.
ALTER TABLE tasks DROP COLUMN lease_pid, DROP COLUMN lease_backend, ADD COLUMN lease_owner integer;
ALTER TABLE subtasks DROP COLUMN lease_pid, DROP COLUMN lease_backend, ADD COLUMN lease_owner integer;

-- Whether the owner of a lease still holds its lock (its signal connection is alive).
-- STABLE and SQL so that it is inlined into the claims.
CREATE FUNCTION lease_owner_alive(owner integer) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = x'74676C73'::integer::oid AND l.objid = owner::oid)
$$;

-- The outbox: 'unsent' is a post whose last call Slack refused outright (nothing landed, so
-- the next claim posts without looking). `claimed_by` is the task attempt that claimed the
-- row last; `settle_after` is when the last call made for it must be over and its post
-- visible in the thread (the call's time limit plus a margin, or less once the caller saw
-- the call end); `first_claimed_at` bounds the search of the thread (no post of this row is
-- older). Rows from before this migration have no first claim time and are searched whole.
ALTER TABLE outbox DROP CONSTRAINT outbox_state_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_state_check CHECK (state IN ('sending', 'sent', 'unsent'));
ALTER TABLE outbox
    ADD COLUMN claimed_by        integer,
    ADD COLUMN claimed_at        timestamptz,
    ADD COLUMN first_claimed_at  timestamptz,
    ADD COLUMN settle_after      timestamptz NOT NULL DEFAULT now();
