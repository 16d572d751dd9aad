"""Delegation on Postgres, as `agent.DelegationStore`.

A delegating round is stored in one transaction: the delegate call (`task_rounds`), the
acknowledgment as a history message (`task:{id}:ack:{n}`), and one leased `subtasks` row
per subtask. Storing is idempotent — a round re-run after a crash finds its delegation
stored and goes on with it instead of asking the model again.

The hand-back from subtasks to their task is the delicate part: the task must become
runnable exactly when its last subtask ends, whichever of "task starts waiting" and "last
subtask ends" happens first. Both sides lock the task row before looking, so they
serialise (each side is one call of a function, storage/migrations/013_handback.sql); and the claim query also treats a waiting task whose subtasks all ended as
runnable, so even a lost wake-up cannot strand a task.

Subtask leases work as task leases do (storage/queue.py): (attempt, owner), taken over at
once when the owner's advisory lock is gone, and every write that extends or ends one is
fenced by both.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from agent import (
    Delegation,
    RoundRecord,
    RoundState,
    Subtask,
    SubtaskOutcome,
    SubtaskRequest,
    SubtaskState,
    Task,
    TaskQueue,
)
from storage.database import TASKS_CHANNEL, Database
from storage.errors import translate_errors
from storage.queue import (
    DEFAULT_LEASE_SECONDS,
    TASK_CANDIDATE,
    PostgresTaskQueue,
    RecoveryLooks,
    claimed_in_backlog,
    task_from_row,
    task_lease,
)
from storage.thread_queue import TASK_COVER

_LOAD = """
SELECT r.number, r.call_id, r.raw_arguments, r.acknowledgment,
       coalesce(json_agg(json_build_object(
           'index', s.index, 'type', s.type, 'params', s.params, 'refs', s.refs,
           'state', s.state, 'result', s.result) ORDER BY s.index)
         FILTER (WHERE s.index IS NOT NULL), '[]') AS subtasks
FROM task_rounds r LEFT JOIN subtasks s ON s.task_id = r.task_id AND s.round = r.number
WHERE r.task_id = $1
GROUP BY r.number, r.call_id, r.raw_arguments, r.acknowledgment
ORDER BY r.number
"""

_INSERT_ROUND = """
INSERT INTO task_rounds (task_id, number, call_id, raw_arguments, acknowledgment)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING true
"""

_INSERT_ACK = """
INSERT INTO messages (id, session_id, anchor, role, kind, text)
SELECT $1, $2, q.seq, 'assistant', 'ack', $3 FROM messages q WHERE q.id = $4
ON CONFLICT (id) DO NOTHING
"""

_INSERT_SUBTASKS = """
INSERT INTO subtasks (task_id, round, index, type, params, refs, deadline)
SELECT $1, $2, i - 1, t, p::jsonb, r::jsonb, now() + make_interval(secs => $6)
FROM unnest($3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS x(t, p, r, i)
ON CONFLICT DO NOTHING
"""

_UNFINISHED = (
    "SELECT 1 FROM subtasks s WHERE s.task_id = tasks.id AND s.state IN ('queued', 'running')"
)

_WAKE = f"""
UPDATE tasks SET state = 'queued', run_after = now()
WHERE id = ANY($1::text[]) AND state = 'waiting' AND NOT EXISTS ({_UNFINISHED})
"""

_EXPIRE = """
UPDATE subtasks SET state = 'timed_out', finished_at = now(),
       result = 'The subtask did not finish before its deadline.',
       lease_owner = NULL, lease_expires = NULL
WHERE state IN ('queued', 'running') AND deadline < now()
RETURNING task_id
"""

# As the task claim (storage/queue.py): queued subtasks first; a dead lease is looked for,
# with one pg_locks read, only when the recovery look is due (`RecoveryLooks`).
# `{p}` prefixes the CTE names, `{recover}` is the parameter asking for the recovery arm.
_SUBTASK_CANDIDATE = """
{p}queued AS (
    SELECT s.task_id, s.round, s.index FROM subtasks s
    WHERE s.state = 'queued' AND s.run_after <= now()
    ORDER BY s.created_at, s.index
    LIMIT 1
    FOR UPDATE OF s SKIP LOCKED
), {p}stale AS (
    SELECT s.task_id, s.round, s.index FROM subtasks s
    WHERE {recover}
      AND s.state = 'running' AND s.run_after <= now()
      AND (s.lease_expires < now() OR s.lease_owner::oid NOT IN (SELECT live_lease_owners()))
    ORDER BY s.created_at, s.index
    LIMIT 1
    FOR UPDATE OF s SKIP LOCKED
), {p}candidate AS (
    SELECT *, true AS recovered FROM {p}stale
    UNION ALL SELECT *, false FROM {p}queued
    LIMIT 1
)
"""

_SUBTASK_LEASE = """
UPDATE subtasks SET state = 'running', attempts = subtasks.attempts + 1,
       lease_owner = $1, lease_expires = now() + make_interval(secs => $2)
FROM {p}candidate
WHERE (subtasks.task_id, subtasks.round, subtasks.index)
    = ({p}candidate.task_id, {p}candidate.round, {p}candidate.index)
RETURNING subtasks.task_id, subtasks.round, subtasks.index, subtasks.type, subtasks.params,
          subtasks.refs, subtasks.attempts,
          greatest(0, extract(epoch FROM subtasks.deadline - now()))::float8 AS remaining,
          {p}candidate.recovered
"""

_CLAIM = "WITH " + _SUBTASK_CANDIDATE.format(p="", recover="$3") + _SUBTASK_LEASE.format(p="")

# A subtask, else a task, in one round trip (a worker's every look for work). The task
# arm runs only when no subtask was found (its gate is a one-time filter: the tasks are
# not even scanned, nor locked, then); subtasks go first because they unblock waiting
# tasks. A subtask comes with its task's row. $1 the owner; $2, $3 the subtask lease and
# recovery look; $4, $5 the task's; $6 the threads' queue modes (storage/thread_queue.py).
_CLAIM_NEXT = (
    "WITH "
    + _SUBTASK_CANDIDATE.format(p="s_", recover="$3")
    + ", s_leased AS ("
    + _SUBTASK_LEASE.format(p="s_")
    + "), "
    + TASK_CANDIDATE.format(p="t_", gate="NOT EXISTS (SELECT 1 FROM s_candidate)", recover="$5")
    + TASK_COVER.format(p="t_", modes="$6")
    + ", t_leased AS ("
    + task_lease(p="t_", owner="$1", lease="$4")
    + """)
SELECT s.task_id AS id, t.session_id, t.address, t.attempts, NULL::timestamptz AS created_at,
       NULL::boolean AS stored_reply, NULL::boolean AS stopped, t.traceparent, t.schedule_id,
       NULL::text AS stopped_by, s.round, s.index, s.type, s.params, s.refs, s.attempts AS subtask_attempts, s.remaining,
       s.recovered, NULL::text[] AS covers, NULL::timestamptz AS leased_at
FROM s_leased s JOIN tasks t ON t.id = s.task_id
UNION ALL
SELECT id, session_id, address, attempts, created_at, stored_reply, stopped, traceparent,
       schedule_id, stopped_by,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, recovered, covers, leased_at
FROM t_leased
"""
)

_FENCE = "task_id = $1 AND round = $2 AND index = $3 AND attempts = $4 AND state = 'running'"

_HEARTBEAT = f"""
UPDATE subtasks SET lease_expires = now() + make_interval(secs => $6)
WHERE {_FENCE} AND lease_owner = $5
"""

_RETRY = f"""
UPDATE subtasks SET state = 'queued', run_after = now() + make_interval(secs => $6),
       lease_owner = NULL, lease_expires = NULL
WHERE {_FENCE} AND lease_owner = $5
"""


class PostgresDelegations:
    """`agent.DelegationStore` on Postgres."""

    def __init__(
        self,
        db: Database,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._lease = lease_seconds
        self._clock = clock
        self._next_sweep = 0.0
        self._recovery = RecoveryLooks(db.wake, clock)

    @translate_errors("The delegation store could not be reached")
    async def load(self, task: Task) -> RoundState:
        rows = await self._db.pool.fetch(_LOAD, task.id)
        finished: list[RoundRecord] = []
        for row in rows:
            subtasks = _json(row["subtasks"])
            if any(s["state"] in ("queued", "running") for s in subtasks):
                return RoundState(tuple(finished), _delegation(row, subtasks))
            finished.append(_record(row, subtasks))
        return RoundState(tuple(finished), None)

    @translate_errors("The delegation store could not be reached")
    async def record(
        self, task: Task, number: int, delegation: Delegation, *, timeout_seconds: float
    ) -> Delegation:
        d = delegation
        async with self._db.pool.acquire() as conn, conn.transaction():
            fresh = await conn.fetchval(
                _INSERT_ROUND, task.id, number, d.call_id, d.raw_arguments, d.acknowledgment
            )
            if fresh:
                await conn.execute(
                    _INSERT_ACK,
                    task.ack_id(number),
                    task.session_id,
                    d.acknowledgment,
                    task.newest_turn_id,
                )
                await conn.execute(
                    _INSERT_SUBTASKS, task.id, number, *_columns(d.subtasks), timeout_seconds
                )
                await conn.execute("SELECT pg_notify($1, '')", TASKS_CHANNEL)
        stored = await self._round(task, number)
        return stored

    @translate_errors("The delegation store could not be reached")
    async def await_subtasks(self, task: Task) -> None:
        me = await self._db.lease_owner()
        # One call (storage/migrations/013_handback.sql): wait, then wake at once if every
        # subtask ended already.
        await self._db.pool.execute(
            "SELECT await_subtasks($1, $2, $3, $4)", task.id, task.attempts, me, TASKS_CHANNEL
        )

    @translate_errors("The delegation store could not be reached")
    async def claim_next(self, tasks: TaskQueue) -> tuple[Subtask, Task] | Task | None:
        if not isinstance(tasks, PostgresTaskQueue):  # another store's tasks: one, then the other
            return await self.claim_subtask() or await tasks.claim()
        await self._sweep()
        me = await self._db.lease_owner()
        look_for_tasks = tasks.recovery.due(me)
        row = await self._db.pool.fetchrow(
            _CLAIM_NEXT,
            me,
            self._lease,
            self._recovery.due(me),
            tasks.lease_seconds,
            look_for_tasks,
            tasks.modes().as_json(),
        )
        if row is None:
            return None
        task = task_from_row(row)
        if row["round"] is None:
            if row["recovered"]:
                tasks.recovery.found()
            claimed_in_backlog(self._db)  # as `PostgresTaskQueue.claim`
            return task
        if look_for_tasks:
            # A subtask was found first, so the task arm did not run, its look with it: the
            # next claim looks, or a steady flow of subtasks would starve a take-over.
            tasks.recovery.again()
        if row["recovered"]:
            self._recovery.found()
        return _subtask(row, task.id, row["subtask_attempts"]), task

    @translate_errors("The delegation store could not be reached")
    async def claim_subtask(self) -> tuple[Subtask, Task] | None:
        await self._sweep()
        me = await self._db.lease_owner()
        row = await self._db.pool.fetchrow(_CLAIM, me, self._lease, self._recovery.due(me))
        if row is None:
            return None
        if row["recovered"]:
            self._recovery.found()
        task_row = await self._db.pool.fetchrow(
            "SELECT id, session_id, address, attempts, traceparent FROM tasks WHERE id = $1",
            row["task_id"],
        )
        assert task_row is not None
        return _subtask(row, row["task_id"], row["attempts"]), task_from_row(task_row)

    @translate_errors("The delegation store could not be reached")
    async def heartbeat_subtask(self, subtask: Subtask) -> bool:
        me = await self._db.lease_owner()
        status = await self._db.pool.execute(_HEARTBEAT, *_key(subtask), me, self._lease)
        return status == "UPDATE 1"

    @translate_errors("The delegation store could not be reached")
    async def settle_subtask(self, subtask: Subtask, state: SubtaskState, text: str) -> None:
        me = await self._db.lease_owner()
        # One call (storage/migrations/013_handback.sql): lock the task row, settle, wake
        # the task if this was its last subtask.
        await self._db.pool.execute(
            "SELECT settle_subtask($1, $2, $3, $4, $5, $6, $7, $8)",
            *_key(subtask),
            me,
            state,
            text,
            TASKS_CHANNEL,
        )

    @translate_errors("The delegation store could not be reached")
    async def retry_subtask_later(self, subtask: Subtask, delay: float) -> None:
        me = await self._db.lease_owner()
        await self._db.pool.execute(_RETRY, *_key(subtask), me, delay)
        asyncio.get_running_loop().call_later(delay, self._db.wake)

    async def _sweep(self) -> None:
        if self._clock() >= self._next_sweep:  # deadlines are seconds apart: sweep at most 1/s
            self._next_sweep = self._clock() + 1.0
            await self._expire_overdue()

    async def _round(self, task: Task, number: int) -> Delegation:
        rows = await self._db.pool.fetch(_LOAD, task.id)
        row = next(r for r in rows if r["number"] == number)
        return _delegation(row, _json(row["subtasks"]))

    async def _expire_overdue(self) -> None:
        async with self._db.pool.acquire() as conn, conn.transaction():
            expired = {r["task_id"] for r in await conn.fetch(_EXPIRE)}
            if expired:
                await self._wake(conn, sorted(expired))

    async def _wake(self, conn: Any, task_ids: list[str]) -> None:
        woken = await conn.execute(_WAKE, task_ids)
        if woken != "UPDATE 0":
            await conn.execute("SELECT pg_notify($1, '')", TASKS_CHANNEL)


def _json(value: Any) -> list[Any]:
    return json.loads(value) if isinstance(value, str) else list(value)


def _requests(subtasks: Sequence[dict[str, Any]]) -> tuple[SubtaskRequest, ...]:
    return tuple(SubtaskRequest(s["type"], s["params"], tuple(s["refs"])) for s in subtasks)


def _delegation(row: asyncpg.Record, subtasks: Sequence[dict[str, Any]]) -> Delegation:
    return Delegation(
        row["acknowledgment"], _requests(subtasks), row["call_id"], row["raw_arguments"]
    )


def _record(row: asyncpg.Record, subtasks: Sequence[dict[str, Any]]) -> RoundRecord:
    outcomes = tuple(
        SubtaskOutcome(s["index"], s["type"], s["state"], s["result"] or "") for s in subtasks
    )
    return RoundRecord(
        row["number"], row["call_id"], row["raw_arguments"], outcomes, row["acknowledgment"]
    )


def _columns(requests: Sequence[SubtaskRequest]) -> tuple[list[str], list[str], list[str]]:
    return (
        [r.type for r in requests],
        [json.dumps(dict(r.params)) for r in requests],
        [json.dumps(list(r.references)) for r in requests],
    )


def _subtask(row: asyncpg.Record, task_id: str, attempts: int) -> Subtask:
    request = SubtaskRequest(row["type"], _json_object(row["params"]), tuple(_json(row["refs"])))
    return Subtask(task_id, row["round"], row["index"], request, attempts, row["remaining"])


def _json_object(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else dict(value)


def _key(subtask: Subtask) -> tuple[str, int, int, int]:
    return subtask.task_id, subtask.round, subtask.index, subtask.attempts
