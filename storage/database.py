"""The connection to Postgres: a pool for work and one long-lived connection for signals.

The long-lived connection does two jobs. It LISTENs for `threadgate_tasks`, so idle
workers wake the moment a task is queued or a session's previous task finishes. And its
server backend (pid and start time) is this process's identity in task leases: when the
process dies, its backend goes with it, and other workers may take over its tasks at once
instead of waiting for the lease to expire.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Self

import asyncpg

from storage.errors import DatabaseUnavailable
from storage.migrations import migrate, pending_migrations

TASKS_CHANNEL = "threadgate_tasks"


async def _nothing_to_reset(conn: object) -> None:
    """Pool connections are returned as they were taken: nothing here SETs, LISTENs or
    holds a session-level lock on them (NOTIFYs are sent, and LISTEN happens on the
    signal connection). So the default reset — four statements on every release, the
    largest share of our statements per task — is skipped; asyncpg still clears its own
    per-connection state and aborts an unfinished transaction."""


@dataclass(frozen=True, slots=True)
class BackendIdentity:
    pid: int
    started: datetime


class Database:
    """The pool, the signal connection, and the wake-up event fed by NOTIFY."""

    def __init__(self, dsn: str, *, min_size: int = 2, max_size: int = 20) -> None:
        self._dsn = dsn
        self._min_size = min_size
        self._max_size = max_size
        self._pool: asyncpg.Pool | None = None
        self._signals: asyncpg.Connection | None = None
        self._identity: BackendIdentity | None = None
        self.wakeup = asyncio.Event()  # for observers (tests): set on every signal
        self._tickets = asyncio.Semaphore(0)
        self._pending_tickets = 0
        self._max_tickets = 64
        self._reconnecting = asyncio.Lock()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn, min_size=self._min_size, max_size=self._max_size, reset=_nothing_to_reset
            )
            await self._connect_signals()
        except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
            await self.close()
            raise DatabaseUnavailable(
                f"Cannot connect to the database ({type(exc).__name__}); check DATABASE_URL."
            ) from exc

    async def close(self) -> None:
        if self._signals is not None and not self._signals.is_closed():
            await self._signals.close()
        self._signals = None
        if self._pool is not None:
            await self._pool.close()
        self._pool = None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise DatabaseUnavailable("The database is not open.")
        return self._pool

    async def identity(self) -> BackendIdentity:
        """This process's lease identity, reconnecting the signal connection if it dropped."""
        async with self._reconnecting:  # several workers notice a drop at once; one reconnects
            if self._signals is None or self._signals.is_closed():
                await self._connect_signals()
        assert self._identity is not None
        return self._identity

    async def migrate(self) -> list[int]:
        async with self.pool.acquire() as conn:
            return await migrate(conn)

    async def is_ready(self) -> bool:
        """True when the database answers and no migration is pending."""
        try:
            async with self.pool.acquire(timeout=2) as conn:
                return not await pending_migrations(conn)
        except (TimeoutError, OSError, asyncpg.PostgresError):
            return False

    async def _connect_signals(self) -> None:
        conn = await asyncpg.connect(self._dsn)
        row = await conn.fetchrow(
            "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        )
        assert row is not None
        await conn.add_listener(TASKS_CHANNEL, self._on_notify)
        conn.add_termination_listener(self._on_terminated)
        self._identity = BackendIdentity(row["pid"], row["backend_start"])
        self._signals = conn
        self.wake()  # anything queued while we were not listening is now ours to find

    def wake(self) -> None:
        """Something may have become runnable: wake one waiting worker (and observers)."""
        self.wakeup.set()
        if self._pending_tickets < self._max_tickets:
            self._pending_tickets += 1
            self._tickets.release()

    async def next_signal(self) -> None:
        """Wait for a wake-up meant for one worker. Each NOTIFY wakes one waiting worker,
        not all of them: a herd of workers each polling for the same single task was most
        of our statements per task. A wake-up that finds nobody waiting is kept (up to a
        bound), so a worker about to wait does not miss it."""
        await self._tickets.acquire()
        self._pending_tickets -= 1

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        self.wake()

    def _on_terminated(self, conn: object) -> None:
        self._signals = None
        self.wake()
