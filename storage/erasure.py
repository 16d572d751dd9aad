"""Erasure: when the app leaves a workspace, what it stored of that workspace leaves too.

Slack's `app_uninstalled`, or a `tokens_revoked` naming the bot's tokens, ends the app's
use of a workspace: Slack's API terms let a distributed app keep Slack data only while it
needs it, and an uninstalled app needs none. The uninstall records a request
(`request_erasure`: a row of `workspace_erasures`, migration 027) before it is acked, and
`Erasure.run` then deletes, for that workspace:

1. its tasks, each with every row that hangs on one (`storage.retention.TASK_ROWS`, the
   list retention deletes a task with: a table added there is erased here too);
2. the rows of `WORKSPACE_TABLES`, in order: its messages (their pictures, PDFs and
   feedback cascade; a file's text is part of its message's), summaries, sessions with
   their audit rows, model usage, daily usage and the short-lived counters;

and last the request itself. A workspace's rows are those whose column holds its key —
its team id, or an org-wide install's enterprise id — or an id that starts with it: every
session id is `key:channel[:thread]` (gateway/slack/events.py).

Bounded: each delete takes at most `batch` rows in a short transaction of its own, so a
large workspace never holds one long transaction, nor its locks.

Exactly once: a redelivered uninstall (Slack's retry, or the same event to another
replica) finds its event id in `seen_events` and changes nothing (`uninstall_seen`); two
deliveries at once make one request, the workspace's row. A run holds a session-level
advisory lock on its workspace: another replica skips it (or, `wait=True`, waits for it to
end and finds nothing left). A run that dies leaves the request, and the next one — every
worker sweeps the requests, `run_every` — carries on with what is left: each step deletes
only what is still there.

Settled first: a run starts `settle` after the request. The uninstall cancelled the
workspace's tasks, and a round still running there stops within that time, so no worker
writes rows the erasure is deleting.

A reinstall finishes the erasure first, settled or not (`PostgresInstallations.save` calls
`finish_erasure`): no event of the new installation is taken before the old one's content
is gone, so nothing new is erased with it.

A table added later whose rows belong to a workspace gets a line in `WORKSPACE_TABLES`, or
one in `KEPT` saying why it stays: tests/storage/test_erasure.py reads every table with a
team, workspace, enterprise or session column from Postgres's catalog and fails on a
table in neither.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from storage.database import Database
from storage.errors import StorageError, translate_errors
from storage.migrations import Connection
from storage.retention import DEFAULT_BATCH, TASK_ROWS, command_count

log = logging.getLogger(__name__)

# How long after the uninstall its erasure starts (module docstring: settled first).
DEFAULT_SETTLE = timedelta(seconds=60)
# An arbitrary constant ("tger"), the first half of each workspace's lock key.
_LOCK_CLASS = 0x7467_6572


@dataclass(frozen=True, slots=True)
class Scoped:
    """A table whose rows belong to one workspace by `column`: holding the workspace's key,
    or (`prefixed`) an id that starts with it and a colon (a session's)."""

    table: str
    column: str
    prefixed: bool = False

    @property
    def statement(self) -> str:
        """One batch of the workspace's rows deleted; $1 the key, $2 the batch."""
        match = f"split_part({self.column}, ':', 1)" if self.prefixed else self.column
        return (
            f"DELETE FROM {self.table} WHERE ctid IN ("
            f"SELECT ctid FROM {self.table} WHERE {match} = $1 LIMIT $2)"
        )


# What erasure deletes after the tasks, children before parents. One line per table.
WORKSPACE_TABLES: tuple[Scoped, ...] = (
    Scoped("messages", "session_id", prefixed=True),
    Scoped("summaries", "session_id", prefixed=True),
    Scoped("session_interventions", "session_id", prefixed=True),
    Scoped("session_epochs", "session_id", prefixed=True),
    Scoped("sessions", "id", prefixed=True),
    Scoped("model_usage", "workspace"),
    # Keys of the daily budgets and hourly counters: `T1`, `T1:U1`, `T1:C1`, a session id.
    Scoped("usage_daily", "key", prefixed=True),
    Scoped("admission_counts", "key", prefixed=True),
    Scoped("limit_notices", "key", prefixed=True),
    Scoped("picture_days", "workspace"),
    # The messages kept as context (storage/seen_messages.py), and how far each of its
    # threads is known complete; the read tier found for it (detected again after a
    # reinstall).
    Scoped("slack_messages", "team"),
    Scoped("slack_streams", "team"),
    Scoped("slack_read_tiers", "team"),
)

# Tables with a workspace's column that erasure leaves as they are, and why.
KEPT: Mapping[str, str] = {
    "slack_installations": "deleted by the uninstall itself, before the ack",
    "schedules": (
        "paused by the uninstall, saying why, so an operator sees what stopped; its owner "
        "or an operator deletes it (`threadgate schedules delete`)"
    ),
    "workspace_erasures": "the requests themselves, each deleted when its erasure ends",
    "slack_read_budgets": (
        "when Slack next allows a read for the workspace: no content, and Slack's limit "
        "still holds for a reinstall within the minute"
    ),
}

_TASKS = """
SELECT id FROM tasks WHERE split_part(session_id, ':', 1) = $1 ORDER BY seq LIMIT $2 FOR UPDATE
"""

# The delivery is recorded as seen and the erasure requested in one statement, so either
# both are stored or neither is (a failed one is redelivered and tried again). True when
# this delivery is new.
_REQUEST = """
WITH seen AS (
    INSERT INTO seen_events (event_id) SELECT $2 WHERE $2::text IS NOT NULL
    ON CONFLICT DO NOTHING RETURNING event_id
), requested AS (
    INSERT INTO workspace_erasures (workspace, reason, event_id)
    SELECT $1, $3, $2 WHERE $2::text IS NULL OR EXISTS (SELECT 1 FROM seen)
    ON CONFLICT (workspace) DO NOTHING
)
SELECT $2::text IS NULL OR EXISTS (SELECT 1 FROM seen)
"""

Counted = Callable[[str, int], None]


@dataclass(frozen=True, slots=True)
class PendingErasure:
    """A workspace whose stored content is still to be deleted."""

    workspace: str
    reason: str
    requested_at: datetime
    waited: timedelta  # since the request, by the database's clock


@dataclass
class ErasureRun:
    """Rows deleted by one run, per table."""

    workspace: str
    deleted: dict[str, int] = field(default_factory=dict)

    def add(self, table: str, count: int) -> None:
        if count:
            self.deleted[table] = self.deleted.get(table, 0) + count


@translate_errors("The uninstall's delivery could not be checked")
async def uninstall_seen(db: Database, event_id: str | None) -> bool:
    """Whether this uninstall was handled before (a redelivery): its event id is seen."""
    if event_id is None:
        return False
    found = await db.pool.fetchval("SELECT 1 FROM seen_events WHERE event_id = $1", event_id)
    return found is not None


@translate_errors("The workspace's erasure could not be requested")
async def request_erasure(
    db: Database, workspace: str, *, reason: str, event_id: str | None = None
) -> bool:
    """Ask for the workspace's stored content to be deleted, recording the delivery
    `event_id` as seen; False when that delivery was seen before (nothing requested)."""
    return bool(await db.pool.fetchval(_REQUEST, workspace, event_id, reason))


@translate_errors("The pending erasures could not be read")
async def pending_erasures(db: Database) -> list[PendingErasure]:
    """Every workspace whose erasure is requested and not over, oldest first."""
    rows = await db.pool.fetch(
        "SELECT workspace, reason, requested_at, now() - requested_at AS waited "
        "FROM workspace_erasures ORDER BY requested_at"
    )
    return [PendingErasure(**dict(row)) for row in rows]


async def finish_erasure(db: Database, workspace: str) -> ErasureRun | None:
    """Erase the workspace now if an erasure of it is pending, settled or not, waiting for
    a replica running it to end (a reinstall calls this before it stores anything)."""
    return await Erasure(db, settle=timedelta(0)).run(workspace, wait=True)


class Erasure:
    """Deletes the stored content of workspaces the app left (module docstring)."""

    def __init__(
        self,
        db: Database,
        *,
        settle: timedelta = DEFAULT_SETTLE,
        batch: int = DEFAULT_BATCH,
        on_deleted: Counted | None = None,
    ) -> None:
        self._db = db
        self._settle = settle
        self._batch = batch
        self._on_deleted = on_deleted or (lambda table, count: None)

    @translate_errors("The workspace's stored content could not be erased")
    async def run(self, workspace: str, *, wait: bool = False) -> ErasureRun | None:
        """Erase `workspace` if its erasure is requested and settled: what was deleted.
        None when there is none due, or another replica is running it (unless `wait`)."""
        async with self._db.pool.acquire() as conn:
            if wait:
                await conn.execute(
                    "SELECT pg_advisory_lock($1, hashtext($2))", _LOCK_CLASS, workspace
                )
            elif not await conn.fetchval(
                "SELECT pg_try_advisory_lock($1, hashtext($2))", _LOCK_CLASS, workspace
            ):
                return None
            try:
                if not await self._due(conn, workspace):
                    return None
                return await self._erase(conn, workspace)
            finally:
                await conn.execute(
                    "SELECT pg_advisory_unlock($1, hashtext($2))", _LOCK_CLASS, workspace
                )

    async def run_settled(self, workspace: str) -> ErasureRun | None:
        """Wait until the workspace's request is settled, then run it (the uninstall's own
        try; the workers' sweep catches what this one could not finish)."""
        await asyncio.sleep(self._settle.total_seconds())
        return await self.run(workspace)

    async def sweep(self) -> int:
        """Run every settled erasure no other replica is running; how many stay pending."""
        for pending in await pending_erasures(self._db):
            await self.run(pending.workspace)
        return len(await pending_erasures(self._db))

    async def run_every(self, seconds: float, on_pending: Callable[[int], None]) -> None:
        """Sweep now and then every `seconds`, until cancelled, telling `on_pending` how
        many erasures wait; a failed sweep is logged and the next one tries again."""
        while True:
            try:
                on_pending(await self.sweep())
            except StorageError as exc:
                log.warning("erasure of an uninstalled workspace failed: %s", exc)
            await asyncio.sleep(seconds)

    async def _due(self, conn: Connection, workspace: str) -> bool:
        due: bool | None = await conn.fetchval(
            "SELECT requested_at <= now() - $2::interval FROM workspace_erasures "
            "WHERE workspace = $1",
            workspace,
            self._settle,
        )
        return bool(due)

    async def _erase(self, conn: Connection, workspace: str) -> ErasureRun:
        done = ErasureRun(workspace)
        while await self._tasks(conn, workspace, done) == self._batch:
            pass
        for scoped in WORKSPACE_TABLES:
            await self._repeat(conn, scoped, workspace, done)
        await conn.execute("DELETE FROM workspace_erasures WHERE workspace = $1", workspace)
        for table, count in done.deleted.items():
            self._on_deleted(table, count)
        log.info("erased the stored content of Slack workspace %s: %s", workspace, done.deleted)
        return done

    async def _tasks(self, conn: Connection, workspace: str, done: ErasureRun) -> int:
        """One batch of the workspace's tasks and their rows, in one transaction."""
        async with conn.transaction():
            ids = [r["id"] for r in await conn.fetch(_TASKS, workspace, self._batch)]
            if ids:
                for table, statement in TASK_ROWS:
                    done.add(table, command_count(await conn.execute(statement, ids)))
        return len(ids)

    async def _repeat(
        self, conn: Connection, scoped: Scoped, workspace: str, done: ErasureRun
    ) -> None:
        while True:
            count = command_count(await conn.execute(scoped.statement, workspace, self._batch))
            done.add(scoped.table, count)
            if count < self._batch:
                return
