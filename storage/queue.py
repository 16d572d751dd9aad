"""The task queue: leased rows in Postgres, one running task per session, oldest first.

A task is runnable when it is queued (or its lease is dead), its `run_after` has come, and
no older unfinished task exists in its session — that last condition is what keeps the
answers of one thread in order while different threads run in parallel. Claims use
`FOR UPDATE SKIP LOCKED`, so workers and replicas never wait on each other's rows.

A lease is (attempt, owner): every claim adds one to the task's attempts and names the
claiming process's current owner (storage/database.py). It is dead when it expired, or
when its owner's advisory lock is gone (the process crashed, or its signal connection
dropped): a restarted gateway resumes its tasks at once. Heartbeats and every write that
ends a lease are fenced by both: a worker whose task was taken over, or whose process took
a new owner since the claim, changes nothing and learns it on its next heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import asyncpg

from agent import Task
from storage.database import TASKS_CHANNEL, Database
from storage.errors import translate_errors

_CLAIM = """
WITH candidate AS (
    SELECT t.id FROM tasks t
    WHERE t.state IN ('queued', 'running', 'waiting')
      AND t.run_after <= now()
      AND CASE t.state
          WHEN 'queued' THEN true
          -- CASE, not OR: pg_locks is looked at only for a lease that has not expired.
          WHEN 'running' THEN CASE WHEN t.lease_expires < now() THEN true
                                   ELSE NOT lease_owner_alive(t.lease_owner) END
          -- A waiting task whose subtasks all ended is runnable, even if the wake-up was lost.
          ELSE NOT EXISTS (SELECT 1 FROM subtasks s
                           WHERE s.task_id = t.id AND s.state IN ('queued', 'running'))
          END
      AND NOT EXISTS (SELECT 1 FROM tasks o
                      WHERE o.session_id = t.session_id AND o.seq < t.seq
                        AND o.state IN ('queued', 'running', 'waiting'))
    ORDER BY t.seq
    LIMIT 1
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE tasks SET state = 'running', attempts = tasks.attempts + 1,
       lease_owner = $1, lease_expires = now() + make_interval(secs => $2)
FROM candidate WHERE tasks.id = candidate.id
RETURNING tasks.id, tasks.session_id, tasks.address, tasks.attempts, tasks.created_at
"""

# Only extends: a lease taken under an owner this process no longer holds stays lost.
_HEARTBEAT = """
UPDATE tasks SET lease_expires = now() + make_interval(secs => $4)
WHERE id = $1 AND attempts = $2 AND state = 'running' AND lease_owner = $3
"""

_FINISH = """
UPDATE tasks SET state = $4, last_error = $5, finished_at = now(),
       lease_owner = NULL, lease_expires = NULL
WHERE id = $1 AND attempts = $2 AND state = 'running' AND lease_owner = $3
"""

_RETRY = """
UPDATE tasks SET state = 'queued', last_error = $4,
       run_after = now() + make_interval(secs => $5),
       lease_owner = NULL, lease_expires = NULL
WHERE id = $1 AND attempts = $2 AND state = 'running' AND lease_owner = $3
"""


def task_from_row(row: asyncpg.Record) -> Task:
    address = row["address"]
    if isinstance(address, str):
        address = json.loads(address)
    # Subtask claims return the task without its creation time: nothing there needs it.
    created = row.get("created_at")
    return Task(row["id"], row["session_id"], address, row["attempts"], created)


class PostgresTaskQueue:
    """`agent.ports.TaskQueue` on Postgres."""

    def __init__(
        self, db: Database, *, lease_seconds: float = 60.0, poll_seconds: float = 5.0
    ) -> None:
        self._db = db
        self._lease = lease_seconds
        self._poll = poll_seconds

    @translate_errors("The task queue could not be reached")
    async def claim(self) -> Task | None:
        me = await self._db.lease_owner()
        row = await self._db.pool.fetchrow(_CLAIM, me, self._lease)
        return None if row is None else task_from_row(row)

    @translate_errors("The task queue could not be reached")
    async def heartbeat(self, task: Task) -> bool:
        me = await self._db.lease_owner()
        status = await self._db.pool.execute(_HEARTBEAT, task.id, task.attempts, me, self._lease)
        return status == "UPDATE 1"

    async def leases_in_doubt(self) -> None:
        await self._db.leases_in_doubt()

    @translate_errors("The task queue could not be reached")
    async def finish(self, task: Task) -> None:
        await self._close(task, "done", None)

    @translate_errors("The task queue could not be reached")
    async def fail(self, task: Task, reason: str) -> None:
        await self._close(task, "failed", reason)

    @translate_errors("The task queue could not be reached")
    async def retry_later(self, task: Task, delay: float, reason: str) -> None:
        me = await self._db.lease_owner()
        await self._db.pool.execute(_RETRY, task.id, task.attempts, me, reason, delay)
        asyncio.get_running_loop().call_later(delay, self._db.wake)

    @translate_errors("The task queue could not be reached")
    async def wait_for_work(self, max_wait: float) -> None:
        # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that
        # arrives together with the wake-up, and a worker that misses it never stops.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(max_wait, self._poll)):
                await self._db.next_signal()

    async def _close(self, task: Task, state: str, reason: str | None) -> None:
        me = await self._db.lease_owner()
        # The session's next task becomes runnable now: wake the workers that wait for it.
        async with self._db.pool.acquire() as conn, conn.transaction():
            await conn.execute(_FINISH, task.id, task.attempts, me, state, reason)
            await conn.execute("SELECT pg_notify($1, '')", TASKS_CHANNEL)
