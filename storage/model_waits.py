"""Tasks that wait for the models: tried at once when a model is back or their thread
speaks again, and every replica told when the models are down or back.

While every model route is unavailable a task is queued again for later, with back-off
(agent/durable/runner.py, "Every model down"). Here that deferral marks the task
(`waits_for_models`, migration 033), so that
- a new message in its thread makes it runnable now (the migration's trigger on every new
  task: one probe of a partial index, no round trip for the admission);
- when any model answers again, `wake_waiting_for_models` makes every marked task runnable
  now, on every replica at once, and says so with a NOTIFY on the tasks channel
  (`models:up:N`): each replica's workers wake to claim them, and each replica's outage
  tracker (agent/models/outage.py) learns the outage is over. `announce_models_down`
  sends `models:down`, so that a replica whose own tasks never failed still announces the
  recovery when its model answers first (storage/database.py routes both to
  `Database.on_models`).
Early tries are counted (`model_wakes`): the runner does not let them use up the tries it
planned, up to a bound.

The thread's notices are one per outage: a task's give-up notice for the models is
recorded (`told`), and a later task of the thread whose message arrived before that
notice went out (`ModelWait.thread_told`) posts neither the "still trying" nor the
give-up notice: what it would say is already said, just after its message.

The claim (storage/queue.py) is untouched: a woken task is a queued task whose `run_after`
has come, claimed like any other.
"""

from __future__ import annotations

import asyncio

from agent import ModelWait, Task
from storage.database import TASKS_CHANNEL, Database, models_signal
from storage.errors import translate_errors

# `TaskQueue.retry_later`'s statement, fenced the same way, marking the task.
_DEFER = """
UPDATE tasks SET state = 'queued', last_error = $4,
       run_after = now() + make_interval(secs => $5),
       lease_owner = NULL, lease_expires = NULL, waits_for_models = true
WHERE id = $1 AND attempts = $2 AND state = 'running' AND lease_owner = $3
"""

# Its early tries, and whether an earlier task of its thread told the thread that the
# models are unavailable after this task's message arrived (or was retried).
_STANDING = """
SELECT t.model_wakes,
       EXISTS (SELECT 1 FROM tasks o
               WHERE o.session_id = t.session_id AND o.told_models_down AND o.seq < t.seq
                 AND o.finished_at >= coalesce(t.restarted_at, t.created_at)) AS told
FROM tasks t WHERE t.id = $1
"""

_TOLD = "UPDATE tasks SET told_models_down = true WHERE id = $1"

# Every waiting task runnable now, and every replica told (even when none waited: their
# trackers learn the outage is over).
_WAKE = """
WITH woken AS (
    UPDATE tasks SET run_after = now(), model_wakes = model_wakes + 1
    WHERE waits_for_models AND state = 'queued' AND run_after > now()
    RETURNING 1
), counted AS (SELECT count(*) AS n FROM woken)
SELECT n, pg_notify($1, $2 || n) FROM counted
"""

_WAITING = """
SELECT count(*) AS n, min(coalesce(restarted_at, created_at)) AS oldest
FROM tasks WHERE waits_for_models AND state = 'queued'
"""


class PostgresModelWaits:
    """`agent.ModelWaits` on Postgres."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("The task's wait for the models could not be read")
    async def standing(self, task: Task) -> ModelWait:
        row = await self._db.pool.fetchrow(_STANDING, task.id)
        if row is None:
            return ModelWait()
        return ModelWait(early_tries=int(row["model_wakes"]), thread_told=bool(row["told"]))

    @translate_errors("The task queue could not be reached")
    async def defer(self, task: Task, delay: float, reason: str) -> None:
        me = await self._db.lease_owner()
        await self._db.pool.execute(_DEFER, task.id, task.attempts, me, reason, delay)
        asyncio.get_running_loop().call_later(delay, self._db.wake)

    @translate_errors("The task's notice could not be recorded")
    async def told(self, task: Task) -> None:
        await self._db.pool.execute(_TOLD, task.id)


@translate_errors("The tasks waiting for the models could not be woken")
async def wake_waiting_for_models(db: Database) -> int:
    """Make every task that waits for the models runnable now, and tell every replica
    (`models:up:N`); how many were woken."""
    row = await db.pool.fetchrow(_WAKE, TASKS_CHANNEL, models_signal(down=False))
    return int(row["n"]) if row is not None else 0


@translate_errors("The replicas could not be told that the models are down")
async def announce_models_down(db: Database) -> None:
    """Tell every replica that every model route is unavailable (`models:down`)."""
    await db.pool.execute("SELECT pg_notify($1, $2)", TASKS_CHANNEL, models_signal(down=True))


@translate_errors("The tasks waiting for the models could not be counted")
async def waiting_for_models(db: Database) -> tuple[int, float | None]:
    """How many tasks wait for the models now, and the age in seconds of the oldest's
    message (None when none waits), for `doctor`."""
    row = await db.pool.fetchrow(
        "SELECT n, extract(epoch FROM now() - oldest)::float8 AS age FROM (" + _WAITING + ") w"
    )
    if row is None or not row["n"]:
        return 0, None
    return int(row["n"]), float(row["age"])
