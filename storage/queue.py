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

Operators steer tasks here too (`threadgate tasks cancel|retry`). A cancel ends the task's
lease the way a take-over does: the row leaves 'running', so the worker's heartbeat, its
posts (the outbox's fence) and its finish all find their lease gone, and it stops through
the same path (agent/durable/runner.py). Each change is one transaction that locks the
task row first, as every claim, fence and finish does, so a cancel racing a worker's
finish has one winner. A retry queues a failed or cancelled task behind the unfinished
tasks of its thread, so its thread is still answered one message at a time. People stop
tasks too, with Slack's Stop button: storage/stops.py ends their leases the same way.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, TypeAlias

import asyncpg

from agent import NOTHING_DELIVERED, Delivered, Task
from storage.database import TASKS_CHANNEL, Database, finished_by
from storage.errors import StorageError, translate_errors
from storage.migrations import Connection
from storage.outbox import sent_posts
from storage.thread_queue import COVERS_COLUMN, FOLLOWUP, TASK_COVER, QueueModes

# Queued tasks first, through `tasks_queued`. Each is checked to be the oldest open task of
# its session by one look into `tasks_open`: a min() subquery, not NOT EXISTS, which the
# planner may turn into a scan of every older open task, quadratic in a backlog. The
# recovery arm (a lease whose time ran out or whose owner is gone, a waiting task whose
# wake-up was lost) runs only when the caller asks for it (`{recover}`: the look is due,
# `RecoveryLooks` below), and reads pg_locks once for the statement. It used to run also
# whenever nothing was queued: that was most claims under load (the look a worker takes
# after each finish, the idle workers' polls), and each such look scans every running task
# (BENCHMARKS.md has what it cost). Both arms lock
# their row with SKIP LOCKED, so workers and replicas never wait on each other; the
# recovery arm wins when both found one, and says so (`recovered`).
#
# `{p}` prefixes the CTE names and `{gate}` is a condition for claiming at all, so that
# the claim of work (storage/delegations.py `claim_next`) can run this after its subtask
# arm, in the same statement; `{recover}` is the parameter asking for the recovery arm.
TASK_CANDIDATE = """
{p}queued AS (
    SELECT t.id FROM tasks t
    WHERE {gate} AND t.state = 'queued' AND t.run_after <= now()
      AND t.seq = (SELECT min(o.seq) FROM tasks o
                   WHERE o.session_id = t.session_id AND o.state IN ('queued', 'running', 'waiting'))
    ORDER BY t.seq
    LIMIT 1
    FOR UPDATE OF t SKIP LOCKED
), {p}stale AS (
    SELECT t.id FROM tasks t
    WHERE {gate} AND {recover}
      AND t.state IN ('running', 'waiting') AND t.run_after <= now()
      AND CASE t.state
          WHEN 'running' THEN t.lease_expires < now()
                              OR t.lease_owner::oid NOT IN (SELECT live_lease_owners())
          -- A waiting task whose subtasks all ended is runnable, even if the wake-up was lost,
          -- unless a person is still to decide on one of its tool calls (one whose time ran
          -- out makes it runnable: its run decides it as timed out, storage/approvals.py).
          ELSE NOT EXISTS (SELECT 1 FROM subtasks s
                           WHERE s.task_id = t.id AND s.state IN ('queued', 'running'))
               AND NOT waits_for_people(t.id)
          END
      AND t.seq = (SELECT min(o.seq) FROM tasks o
                   WHERE o.session_id = t.session_id AND o.state IN ('queued', 'running', 'waiting'))
    ORDER BY t.seq
    LIMIT 1
    FOR UPDATE OF t SKIP LOCKED
), {p}candidate AS (
    SELECT id, true AS recovered FROM {p}stale
    UNION ALL SELECT id, false FROM {p}queued
    LIMIT 1
)
"""

# `{p}candidate` leased to owner `{owner}` for `{lease}` seconds.
TASK_LEASE = """
UPDATE tasks SET state = 'running', attempts = tasks.attempts + 1,
       lease_owner = {owner}, lease_expires = now() + make_interval(secs => {lease})
FROM {p}candidate WHERE tasks.id = {p}candidate.id
-- A retried task's time limits count from its retry (storage/migrations/006_operators.sql).
-- Whether its reply is stored (agent.reply_id's spelling) saves the runner a read.
RETURNING tasks.id, tasks.session_id, tasks.address, tasks.attempts,
          coalesce(tasks.restarted_at, tasks.created_at) AS created_at,
          EXISTS (SELECT 1 FROM messages m WHERE m.id = 'task:' || tasks.id || ':reply')
              AS stored_reply,
          tasks.stopped_at IS NOT NULL AS stopped, tasks.traceparent, tasks.schedule_id,
          tasks.stopped_by, {p}candidate.recovered, {covers},
          -- After the row's lock is ours: an interrupt of this lease is later, by this clock.
          clock_timestamp() AS leased_at
"""


def task_lease(p: str, owner: str, lease: str) -> str:
    """TASK_LEASE of `{p}candidate`, returning what it covers (storage/thread_queue.py)."""
    return TASK_LEASE.format(p=p, owner=owner, lease=lease, covers=COVERS_COLUMN.format(p=p))


# The claim covers the later queued tasks of its thread in its own statement ($4: the
# threads' queue modes), so a claim and its cover commit together (storage/thread_queue.py).
_CLAIM = (
    "WITH "
    + TASK_CANDIDATE.format(p="", gate="true", recover="$3")
    + TASK_COVER.format(p="", modes="$4")
    + task_lease(p="", owner="$1", lease="$2")
)

# How often a process looks for dead leases: a crashed replica's tasks wait at most this
# long (plus a free worker, and a claim: workers claim when woken and when their poll
# times out) to be taken over.
RECOVERY_SECONDS = 1.0
# How long a claimed task or subtask stays its worker's without a heartbeat
# (THREADGATE_LEASE_SECONDS).
DEFAULT_LEASE_SECONDS = 60.0


class RecoveryLooks:
    """When a claim looks for dead leases: once every `RECOVERY_SECONDS`, and at once
    - on the first claim of a process (a restarted gateway resumes its tasks),
    - when the process's lease owner changed (its signal connection was replaced, so its
      own leases under the old owner are dead: storage/database.py),
    - after a look that found one (`found`: a crash leaves several, each look takes one),
    - after a claim that was due to look but did not (`again`)."""

    def __init__(
        self, wake: Callable[[], None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._wake = wake  # a waiting worker of this process (`Database.wake`)
        self._clock = clock
        self._next = 0.0
        self._owner: int | None = None

    def due(self, owner: int) -> bool:
        """Whether this claim, by `owner`, looks; True starts the next period."""
        now = self._clock()
        due = now >= self._next or owner != self._owner
        if due:
            self._next, self._owner = now + RECOVERY_SECONDS, owner
        return due

    def found(self) -> None:
        """A look took over a dead lease: the next claim looks again, and a worker is woken
        to make it (a crash leaves several)."""
        self.again()
        self._wake()

    def again(self) -> None:
        """The next claim looks: this one's look did not run (a claim of work that found a
        subtask first), or it found a lease (`found`)."""
        self._next = 0.0


# Whether the worker running in this context claims in a backlog: its wake-up said so
# (`Database.next_signal`: the start's, a reconnect's, or a backlog claim's), or nothing woke
# it (its poll timed out), or it has not waited yet. Such a claim that finds a task wakes
# another worker to claim in the backlog in turn, so work nobody announced is taken by as
# many workers as are free, and the last of them finds nothing. A claim after an
# announced wake-up (an admission's NOTIFY, a finish's) looks for that work only: the
# rest of the queue has wake-ups of its own. Each worker is an asyncio task, with a
# context of its own, which awaits `wait_for_work` and its claims itself (in a task of
# their own, as `asyncio.wait_for` runs them, they would set a copy of the context).
_BACKLOG: ContextVar[bool] = ContextVar("threadgate_backlog", default=True)


def claimed_in_backlog(db: Database) -> None:
    """A claim found a task: in a backlog (`_BACKLOG`), one more worker is woken to look."""
    if _BACKLOG.get():
        db.wake(backlog=True)


# Only extends: a lease taken under an owner this process no longer holds stays lost.
_HEARTBEAT = """
UPDATE tasks SET lease_expires = now() + make_interval(secs => $4)
WHERE id = $1 AND attempts = $2 AND state = 'running' AND lease_owner = $3
"""

# Ending a lease and waking a worker, in one statement (one transaction: the NOTIFY is
# delivered when the finish commits). Every other process wakes a worker for it, even
# when this statement sees nothing queued in the thread: a message admitted while it ran is
# invisible to its snapshot, and its admission's own wake-up may have been spent by a worker
# that found it blocked behind this very task. A claim after the commit sees it. The
# payload names the finishing process (`finished_by`, storage/database.py), which wakes
# none for it: there the finish wakes one itself (`PostgresTaskQueue._ended`) when the
# statement saw the thread's next message queued, or when a NOTIFY that may concern the
# thread came in while it ran (the admission above, whose claim may have run before this
# commit). Waking one at every finish was a look after each answer, most often finding
# nothing.
_FINISH = """
WITH done AS (
    -- A stopped task (storage/stops.py) ends cancelled, whatever its last round did.
    UPDATE tasks SET state = CASE WHEN stopped_at IS NULL THEN $4 ELSE 'cancelled' END,
           last_error = $5, finished_at = now(),
           lease_owner = NULL, lease_expires = NULL
    WHERE id = $1 AND attempts = $2 AND state = 'running' AND lease_owner = $3
    RETURNING session_id
), told AS (  -- selected below, so that it runs
    SELECT count(pg_notify($6, $7)) AS n FROM done
)
-- Whether the end made its thread's next message runnable (a queued task of the session:
-- only the oldest open one is claimed, storage/queue.py TASK_CANDIDATE). The caller wakes
-- a worker for it: the notify above wakes other processes only (`finished_by`).
SELECT EXISTS (SELECT 1 FROM done d JOIN tasks o ON o.session_id = d.session_id
               WHERE o.state = 'queued') AS next_queued, (SELECT n FROM told) AS told
"""

# The finish of a task whose reply's posts landed, marking them sent in the same statement
# ($8 their ids, $9 their ts): one statement where there were two. The mark is not fenced
# (storage/outbox.py): a finish of a lost lease changes nothing of the task, but the posts
# it knows landed are marked all the same. A crash before it leaves the posts unmarked
# ('open', or 'sending' past its call): the next attempt's publish completes the open
# message again or finds the post in the thread, and posts nothing twice.
_FINISH_DELIVERED = "WITH " + sent_posts("$8", "$9") + "," + _FINISH.removeprefix("\nWITH")

# Whether an interrupt (storage/thread_queue.py) ended the lease of attempt $3, leased at
# $2: it came after that claim (both read the clock holding the row's lock), and at most
# one claim came since (the one that answers with everything pending). An interrupt before
# the claim ended an earlier attempt; one after a later claim, a later one.
_INTERRUPTED = """
SELECT interrupted_at >= $2 AND attempts IN ($3, $3 + 1) FROM tasks WHERE id = $1
"""

# A retry after an error no longer waits for the models (storage/model_waits.py defers).
_RETRY = """
UPDATE tasks SET state = 'queued', last_error = $4,
       run_after = now() + make_interval(secs => $5),
       lease_owner = NULL, lease_expires = NULL, waits_for_models = false
WHERE id = $1 AND attempts = $2 AND state = 'running' AND lease_owner = $3
"""


def task_from_row(row: asyncpg.Record) -> Task:
    # Subtask claims return the task without its creation time or whether its reply is
    # stored: nothing there needs them.
    created, stored = row.get("created_at"), row.get("stored_reply")
    stopped, traceparent = bool(row.get("stopped")), row.get("traceparent")
    schedule, covers = row.get("schedule_id"), row.get("covers")
    return Task(
        row["id"],
        row["session_id"],
        address_of(row),
        row["attempts"],
        created,
        stored,
        stopped,
        traceparent,
        str(schedule) if schedule is not None else None,
        row.get("stopped_by") if stopped else None,
        tuple(covers or ()),
        leased_at=row.get("leased_at"),
    )


def address_of(row: asyncpg.Record) -> dict[str, str]:
    """The task's Slack address (team, channel, thread_ts) from its jsonb column."""
    address = row["address"]
    return dict(json.loads(address) if isinstance(address, str) else address)


class PostgresTaskQueue:
    """`agent.ports.TaskQueue` on Postgres."""

    def __init__(
        self,
        db: Database,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        poll_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        modes: Callable[[], QueueModes] = lambda: FOLLOWUP,
    ) -> None:
        self._db = db
        self._lease = lease_seconds
        self._poll = poll_seconds
        self.modes = modes  # each thread's queue mode, asked at every claim (a reload applies)
        self.recovery = RecoveryLooks(db.wake, clock)

    @property
    def lease_seconds(self) -> float:
        return self._lease

    @translate_errors("The task queue could not be reached")
    async def claim(self) -> Task | None:
        me = await self._db.lease_owner()
        row = await self._db.pool.fetchrow(
            _CLAIM, me, self._lease, self.recovery.due(me), self.modes().as_json()
        )
        if row is None:
            return None
        if row["recovered"]:
            self.recovery.found()
        claimed_in_backlog(self._db)
        return task_from_row(row)

    @translate_errors("The task queue could not be reached")
    async def heartbeat(self, task: Task) -> bool:
        me = await self._db.lease_owner()
        status = await self._db.pool.execute(_HEARTBEAT, task.id, task.attempts, me, self._lease)
        return status == "UPDATE 1"

    async def leases_in_doubt(self) -> None:
        await self._db.leases_in_doubt()

    @translate_errors("The task queue could not be reached")
    async def cancelled(self, task: Task) -> bool:
        # A stopped task counts too, though it waits, queued, to say it was stopped.
        row = await self._db.pool.fetchrow(
            "SELECT state, stopped_at IS NOT NULL AS stopped FROM tasks WHERE id = $1", task.id
        )
        return row is not None and (row["state"] == "cancelled" or bool(row["stopped"]))

    @translate_errors("The task queue could not be reached")
    async def interrupted(self, task: Task) -> bool:
        if task.leased_at is None:
            return False
        return bool(
            await self._db.pool.fetchval(_INTERRUPTED, task.id, task.leased_at, task.attempts)
        )

    @translate_errors("The task queue could not be reached")
    async def finish(self, task: Task, delivered: Delivered = NOTHING_DELIVERED) -> None:
        await self._close(task, "done", None, delivered)

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
        try:
            async with asyncio.timeout(min(max_wait, self._poll)):
                backlog = await self._db.next_signal()
        except TimeoutError:
            backlog = True  # nobody announced what this worker may find now: look for more
        _BACKLOG.set(backlog)

    def dropped_wakeups(self) -> int:
        return self._db.dropped_wakeups

    async def _close(
        self,
        task: Task,
        state: str,
        reason: str | None,
        delivered: Delivered = NOTHING_DELIVERED,
    ) -> None:
        me = await self._db.lease_owner()
        statement = _FINISH
        args: list[object] = [task.id, task.attempts, me, state, reason]
        args += [TASKS_CHANNEL, finished_by(me)]  # the NOTIFY's channel and payload
        if delivered.posts:  # the posts that landed marked sent in the same statement
            ids, refs = zip(*delivered.posts, strict=True)
            statement = _FINISH_DELIVERED
            args += [list(ids), list(refs)]
        heard = self._db.heard
        next_queued = await self._db.pool.fetchval(statement, *args)
        self._ended(task, next_queued, heard)

    def _ended(self, task: Task, next_queued: bool | None, heard: int) -> None:
        """After a task's end: a worker woken for the thread's next message, which the end
        made runnable, or for one admitted to the thread while the finish ran (`_FINISH`)."""
        if next_queued or self._db.heard_for(task.session_id, since=heard):
            self._db.wake()


# -- operators ------------------------------------------------------------------------------

Action: TypeAlias = Literal["cancel", "retry"]

# The states an operator may act on.
_CANCELLABLE = ("queued", "running", "waiting")
_RETRYABLE = ("failed", "cancelled")

# At most this many parts of one message (a long reply is split into `{id}#1`, `#2`, …;
# the output token limit keeps replies to two or three parts).
MAX_PARTS = 16


class UnknownTask(StorageError):
    """No task has this id."""


class InterventionRefused(StorageError):
    """The task's state does not allow what the operator asked; the message says why."""


@dataclass(frozen=True, slots=True)
class Intervention:
    """What an operator did to a task, as recorded."""

    task_id: str
    action: Action
    from_state: str
    actor: str
    reason: str | None


_LOCK = "SELECT state, session_id, address, attempts FROM tasks WHERE id = $1 FOR UPDATE"

_CANCEL = """
UPDATE tasks SET state = 'cancelled', finished_at = now(), lease_owner = NULL, lease_expires = NULL
WHERE id = $1
"""

# Subtasks end too: their workers' heartbeats and settles are fenced by 'running'.
_CANCEL_SUBTASKS = """
UPDATE subtasks SET state = 'failed', result = 'The subtask was cancelled by an operator.',
       finished_at = now(), lease_owner = NULL, lease_expires = NULL
WHERE task_id = $1 AND state IN ('queued', 'running')
"""

# A fresh attempt: runnable now, its time limits and model-request allowance start again,
# and a new seq puts it behind every unfinished task of its thread (one at a time, in
# the order they are given).
_RETRY_TASK = """
UPDATE tasks SET state = 'queued', run_after = now(), restarted_at = now(), finished_at = NULL,
       model_requests = 0, lease_owner = NULL, lease_expires = NULL,
       stopped_at = NULL, stopped_by = NULL,
       seq = nextval(pg_get_serial_sequence('tasks', 'seq'))
WHERE id = $1
"""

# A cancelled task's covered messages (storage/thread_queue.py) are nobody's answer now:
# each is queued again in its place, to be answered after it.
_RELEASE_COVERED = """
UPDATE tasks SET state = 'queued', covered_by = NULL, finished_at = NULL, run_after = now()
WHERE covered_by = $1 AND state = 'covered'
"""

_RECORD = """
INSERT INTO task_interventions (task_id, action, actor, reason, from_state)
VALUES ($1, $2, $3, $4, $5)
"""

# The posts that end a task: once one of them is claimed, the task is ending on its own.
_ENDING_POSTS = "SELECT id FROM outbox WHERE id = ANY($1::text[]) AND state <> 'unsent' LIMIT 1"


def with_parts(post_ids: Sequence[str]) -> list[str]:
    """The outbox ids of these posts and of every part of them (a long message is posted
    as `{id}`, `{id}#1`, `{id}#2`, …: gateway/delivery/posts.py)."""
    return [*post_ids, *(f"{base}#{n}" for base in post_ids for n in range(1, MAX_PARTS))]


@translate_errors("The task could not be cancelled")
async def cancel_task(
    db: Database, task_id: str, *, actor: str, reason: str | None = None
) -> Intervention:
    """Stop a queued, waiting or running task and its subtasks: nothing more is posted for
    it, and its thread's next message runs. `UnknownTask` or `InterventionRefused` else."""
    async with db.pool.acquire() as conn, conn.transaction():
        task, state = await _locked(conn, task_id)
        if state not in _CANCELLABLE:
            raise InterventionRefused(_cannot_cancel(task_id, state))
        if await conn.fetchval(_ENDING_POSTS, with_parts([task.reply_id, task.failure_id])):
            raise InterventionRefused(
                f"Task {task_id} is already posting its reply or failure notice; "
                "it can no longer be cancelled."
            )
        await conn.execute(_CANCEL, task_id)
        await conn.execute(_CANCEL_SUBTASKS, task_id)
        await conn.execute(_RELEASE_COVERED, task_id)
        return await _record(conn, Intervention(task_id, "cancel", state, actor, reason))


async def cancel_if_queued(
    conn: Connection, task_id: str, *, actor: str, reason: str | None = None
) -> Intervention | None:
    """Cancel the task inside the caller's transaction if it has not started (queued);
    None when it is unknown or past that (a running task is left to finish)."""
    row = await conn.fetchrow(_LOCK, task_id)
    if row is None or row["state"] != "queued":
        return None
    await conn.execute(_CANCEL, task_id)
    await conn.execute(_RELEASE_COVERED, task_id)
    return await _record(conn, Intervention(task_id, "cancel", "queued", actor, reason))


@translate_errors("The task could not be retried")
async def retry_task(
    db: Database, task_id: str, *, actor: str, reason: str | None = None
) -> Intervention:
    """Queue a failed or cancelled task again, as a fresh attempt behind its thread's
    unfinished tasks. `UnknownTask` or `InterventionRefused` otherwise."""
    async with db.pool.acquire() as conn, conn.transaction():
        _, state = await _locked(conn, task_id)
        if state not in _RETRYABLE:
            raise InterventionRefused(_cannot_retry(task_id, state))
        await conn.execute(_RETRY_TASK, task_id)
        return await _record(conn, Intervention(task_id, "retry", state, actor, reason))


async def _locked(conn: Connection, task_id: str) -> tuple[Task, str]:
    row = await conn.fetchrow(_LOCK, task_id)
    if row is None:
        raise UnknownTask(f"No task has the id {task_id!r}; `threadgate tasks list` shows them.")
    return Task(task_id, row["session_id"], address_of(row), row["attempts"]), str(row["state"])


async def _record(conn: Connection, done: Intervention) -> Intervention:
    await conn.execute(_RECORD, done.task_id, done.action, done.actor, done.reason, done.from_state)
    # The thread's next task (cancel) or this one (retry) is runnable now: wake a worker.
    await conn.execute("SELECT pg_notify($1, '')", TASKS_CHANNEL)
    return done


def _cannot_cancel(task_id: str, state: str) -> str:
    if state == "done":
        return f"Task {task_id} is already done (answered); there is nothing to cancel."
    return f"Task {task_id} has already ended ({state}); there is nothing to cancel."


def _cannot_retry(task_id: str, state: str) -> str:
    if state == "done":
        return f"Task {task_id} is done (answered); only a failed or cancelled task can be retried."
    return (
        f"Task {task_id} is {state} and will run without a retry; "
        "only a failed or cancelled task can be retried."
    )
