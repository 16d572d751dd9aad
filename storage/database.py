"""The connection to Postgres: a pool for work, one for admissions, and one long-lived
connection for signals.

Admissions (storage/admission.py: the statements an ack waits on) may have connections
kept for them (`admission_size`): an admission takes a work connection when one is free,
and one of its own when reply work — streams, posts, heartbeats, claims — holds every
work connection. Not its own connections only, and not waiting for one of them: under
load a connection is held for as long as its statement's answer waits for the event
loop, not just for the statement, and two of them could not carry 100 events/s
(BENCHMARKS.md); when every connection of both is lent, an admission waits in the work
pool's line, where twenty come back. With `admission_size` 0 admissions share the work
pool.

The long-lived connection does two jobs. It LISTENs for `threadgate_tasks`, so idle
workers wake the moment a task is queued or a session's previous task finishes (or, with
a `models:` payload, the moment every model is down or one is back: storage/model_waits.py
and `on_models`), for
`threadgate_stops`, so a worker whose task someone stopped learns it at once, and for
`threadgate_schedules`, so the scheduler hears of a new or changed schedule. And it is
this process's identity in leases: it picks a random owner number and holds a
session-level advisory lock on it for as long as it lives. Every lease the process takes
names that owner; another process may take a lease over at once when its owner's lock is
gone (storage/migrations/003_fencing.sql, `lease_owner_alive`), instead of waiting for
the lease to expire. pg_locks shows every session's locks to every role, so this works
across replicas that log in as different roles, without `pg_read_all_stats`.

A lease is bound to the owner that took it, for good. When the signal connection drops
(idle timeout, `pg_terminate_backend`, failover) its lock is released and other workers
may take the process's leases at once; so the process takes a new owner number when it
reconnects, its old leases are lost to it (their heartbeats and every fenced write fail),
and `leases_in_doubt` wakes its workers to find out at once.

A process that runs no task (an ingress) needs neither job and opens no such connection
(`signals=False`) unless something asks it for a lease.

Both jobs need one server session that outlives every statement: a direct connection or a
pooler in session mode. PgBouncer's transaction mode breaks LISTEN and session locks.
"""

from __future__ import annotations

import asyncio
import collections
import secrets
from collections.abc import Callable
from types import TracebackType
from typing import Self

import asyncpg

from storage.dsn import cannot_connect
from storage.errors import DatabaseUnavailable
from storage.migrations import migrate, pending_migrations
from storage.pool import ConnectionPool

TASKS_CHANNEL = "threadgate_tasks"
# A task was stopped (storage/stops.py): every worker's heartbeat looks at its lease now.
STOPS_CHANNEL = "threadgate_stops"
# A schedule was added or changed (storage/schedules.py): schedulers look again now.
SCHEDULES_CHANNEL = "threadgate_schedules"

# The advisory lock key space of lease owners ("tgls"); `lease_owner_alive` in
# migrations/003_fencing.sql looks for the same number. The owner is the second key.
LEASE_LOCK_SPACE = 0x7467_6C73
# How the signal connection shows in pg_stat_activity, for operators (and chaos tests).
SIGNALS_APPLICATION = "threadgate-signals"
# Connections kept for admissions in a process that takes events (THREADGATE_ADMISSION_
# CONNECTIONS): each admission is two short statements, and acks come a few at a time.
DEFAULT_ADMISSION_CONNECTIONS = 2
# The work pool's most connections (THREADGATE_DB_CONNECTIONS): a worker process's task
# workers (16 by default), their heartbeats and posts, with a few to spare.
DEFAULT_WORK_CONNECTIONS = 20


# The tasks channel's payloads that say the models are down (`models:down`) or back
# (`models:up:N`, N tasks made runnable): storage/model_waits.py.
MODELS_SIGNAL = "models:"


# At most this many workers are woken by one `models:up:N`.
MODELS_UP_WAKES = 16


def models_signal(*, down: bool) -> str:
    """The payload (for `up`, its prefix: the count of woken tasks follows)."""
    return f"{MODELS_SIGNAL}down" if down else f"{MODELS_SIGNAL}up:"


FINISHED = "finished:"
ADMITTED = "admitted:"


def finished_by(owner: int) -> str:
    """The payload of the NOTIFY a finish under lease owner `owner` sends (storage/queue.py):
    the process holding that owner number does not wake a worker for it, every other does."""
    return f"{FINISHED}{owner}"


def admitted_to(session: str) -> str:
    """The payload of the NOTIFY an admission sends (storage/admission.py, `admit_thread_turn`):
    the thread its task is in, so that a finish in this thread knows it came in
    (`Database.heard_for`)."""
    return f"{ADMITTED}{session}"


# Generic plans for every prepared statement: our statements are the same few dozen,
# prepared once per pooled connection, and Postgres's default planned many of them again
# on every execution (a custom plan each time the generic one looked no cheaper), a large
# share of Postgres's CPU per answered event (BENCHMARKS.md). Their filters name states
# literally, so a generic plan uses the same partial indexes a custom one would.
_SESSION = {"plan_cache_mode": "force_generic_plan"}


class Database:
    """The pool, the signal connection, and the wake-up event fed by NOTIFY."""

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 2,
        max_size: int = DEFAULT_WORK_CONNECTIONS,
        admission_size: int = 0,
        on_pool_wait: Callable[[float], None] | None = None,
        signals: bool = True,
    ) -> None:
        self._dsn = dsn
        # False for a process that runs no task (an ingress): it takes no lease and waits
        # for no NOTIFY, so its signal connection opens only if a lease is asked for.
        self._listens = signals
        self._min_size = min(min_size, max_size)  # THREADGATE_DB_CONNECTIONS may be 1
        self._max_size = max_size
        self._admission_size = admission_size
        self._on_pool_wait = on_pool_wait  # seconds a statement waited for a connection
        self._pool: ConnectionPool | None = None
        self._admission: ConnectionPool | None = None
        self._signals: asyncpg.Connection | None = None
        self._owner: int | None = None
        self._in_doubt = asyncio.Event()
        self.wakeup = asyncio.Event()  # for observers (tests): set on every signal
        # Set on every change of a schedule, and on every reconnect (one may have been
        # missed meanwhile); the scheduler clears it before it looks.
        self.schedules_changed = asyncio.Event()
        self._tickets = asyncio.Semaphore(0)
        self._pending_tickets = 0
        self._max_tickets = 64
        self._backlog_tickets = 0  # of the kept ones, those a backlog's (`next_signal`)
        # Wake-ups no worker got a ticket for (the bound was reached): a worker that sees
        # this grow while it ran a task looks for work again at once (agent/durable/runner.py).
        self.dropped_wakeups = 0
        # The task NOTIFYs heard (`heard`, a count), the last of them with the thread each
        # concerns (an admission's) or None (a kind that does not say): a finish asks
        # whether one heard while it ran may concern its thread (`heard_for`).
        self.heard = 0
        self._heard: collections.deque[tuple[int, str | None]] = collections.deque(maxlen=256)
        self._reconnecting = asyncio.Lock()
        # Told when a replica says every model is down (True) or one is back (False).
        self.on_models: Callable[[bool], None] | None = None

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        try:
            pool = self._pool_of(self._min_size, self._max_size)
            await pool.open()
            self._pool = pool
            if self._admission_size:
                self._admission = self._pool_of(1, self._admission_size)
                await self._admission.open()
            if self._listens:
                await self._connect_signals()
        # ValueError: a URL asyncpg cannot parse (its ClientConfigurationError is one).
        except (TimeoutError, OSError, ValueError, asyncpg.PostgresError) as exc:
            await self.close()
            raise DatabaseUnavailable(cannot_connect(self._dsn, exc)) from exc

    def _pool_of(self, min_size: int, max_size: int) -> ConnectionPool:
        return ConnectionPool(
            self._dsn,
            min_size=min_size,
            max_size=max_size,
            server_settings=_SESSION,
            on_wait=self._on_pool_wait,
        )

    async def close(self) -> None:
        if self._signals is not None and not self._signals.is_closed():
            await self._signals.close()
        self._signals = None
        for pool in (self._admission, self._pool):
            if pool is not None:
                await pool.close()
        self._pool = self._admission = None

    @property
    def pool(self) -> ConnectionPool:
        if self._pool is None:
            raise DatabaseUnavailable("The database is not open.")
        return self._pool

    @property
    def admissions(self) -> ConnectionPool:
        """Where an admission's next statement runs: the work pool while it has a
        connection free, else the connections kept for admissions while one of them is,
        else the work pool again (module docstring)."""
        pool = self.pool
        if self._admission is None or pool.available or not self._admission.available:
            return pool
        return self._admission

    async def lease_owner(self) -> int:
        """The owner number this process's leases are taken under now, reconnecting the
        signal connection (under a new number) if it dropped."""
        async with self._reconnecting:  # several workers notice a drop at once; one reconnects
            if self._signals is None or self._signals.is_closed():
                await self._connect_signals()
        assert self._owner is not None
        return self._owner

    async def leases_in_doubt(self) -> None:
        """Return when the signal connection drops (from then on every lease taken under
        the owner it held may be someone else's), or when a task was stopped (its lease
        ended, on whichever replica holds it)."""
        await self._in_doubt.wait()

    def _doubt(self) -> None:
        """Wake everyone waiting in `leases_in_doubt`; later waiters wait for the next."""
        self._in_doubt.set()
        self._in_doubt = asyncio.Event()

    async def migrate(self) -> list[int]:
        async with self.pool.acquire() as conn:
            return await migrate(conn)

    async def is_ready(self) -> bool:
        """True when the database answers and no migration is pending."""
        try:
            async with asyncio.timeout(2), self.pool.acquire() as conn:
                return not await pending_migrations(conn)
        except (TimeoutError, OSError, asyncpg.PostgresError):
            return False

    async def _connect_signals(self) -> None:
        conn = await asyncpg.connect(
            self._dsn, server_settings={"application_name": SIGNALS_APPLICATION}
        )
        try:
            owner = await _take_owner_lock(conn)
            await conn.add_listener(TASKS_CHANNEL, self._on_notify)
            await conn.add_listener(STOPS_CHANNEL, self._on_stop)
            await conn.add_listener(SCHEDULES_CHANNEL, self._on_schedules)
        except BaseException:
            await conn.close()
            raise
        conn.add_termination_listener(self._on_terminated)
        self._owner = owner
        self._signals = conn
        self.schedules_changed.set()
        # Anything queued while we were not listening is now ours to find, unannounced.
        self.wake(backlog=True)

    def wake(self, *, backlog: bool = False) -> None:
        """Something may have become runnable: wake one waiting worker (and observers).
        `backlog`: work nobody announced, the worker claims in it (storage/queue.py
        `_BACKLOG`)."""
        self.wakeup.set()
        if self._pending_tickets < self._max_tickets:
            self._pending_tickets += 1
            self._backlog_tickets += backlog
            self._tickets.release()
        else:
            self.dropped_wakeups += 1

    async def next_signal(self) -> bool:
        """Wait for a wake-up meant for one worker; whether it was a backlog's
        (`wake(backlog=True)`). Each NOTIFY wakes one waiting worker, not all of them: a
        herd of workers each polling for the same single task was most of our statements
        per task. A wake-up that finds nobody waiting is kept (up to a bound), so a worker
        about to wait does not miss it."""
        await self._tickets.acquire()
        self._pending_tickets -= 1
        if self._backlog_tickets:
            self._backlog_tickets -= 1
            return True
        return False

    def heard_for(self, session: str, *, since: int) -> bool:
        """Whether a task NOTIFY heard after the count `since` (`heard`) may concern
        `session`: an admission to it, one of a kind that does not say, or more than are
        remembered."""
        if self.heard - since > len(self._heard):
            return True
        for index, concerns in reversed(self._heard):
            if index <= since:
                return False
            if concerns is None or concerns == session:
                return True
        return False

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        said = payload if isinstance(payload, str) else ""
        if self._owner is not None and said == finished_by(self._owner):
            # Our own finish: it woke a worker itself if it made work runnable here
            # (storage/queue.py `_FINISH`).
            self.wakeup.set()
            return
        # A finish (another process's) concerns none of the threads our workers run; an
        # admission names its thread; any other kind may concern any thread.
        if not said.startswith(FINISHED):
            self._hear(said.removeprefix(ADMITTED) if said.startswith(ADMITTED) else None)
        if said.startswith(MODELS_SIGNAL):
            return self._on_models(said.removeprefix(MODELS_SIGNAL))
        self.wake()

    def _hear(self, session: str | None) -> None:
        self.heard += 1
        self._heard.append((self.heard, session))

    def _on_models(self, said: str) -> None:
        """`down`, or `up:N` (N tasks made runnable): the listener told, and for `up` a
        worker woken per task, up to `MODELS_UP_WAKES`, each claiming in a backlog (one
        that finds a task wakes one more: the rest of the N)."""
        self.wakeup.set()
        if self.on_models is not None:
            self.on_models(said == "down")
        if said == "down":
            return
        woken = said.removeprefix("up:")
        for _ in range(min(int(woken), MODELS_UP_WAKES) if woken.isdigit() else 1):
            self.wake(backlog=True)

    def _on_stop(self, conn: object, pid: int, channel: str, payload: object) -> None:
        # A stop ended a lease, maybe one of ours: each running task's heartbeat beats now,
        # and the stopped one finds its lease gone (agent/durable/runner.py). A stop is
        # rare and a beat one UPDATE, so every lease is asked rather than tracked by id.
        self._doubt()

    def _on_schedules(self, conn: object, pid: int, channel: str, payload: object) -> None:
        self.schedules_changed.set()

    def _on_terminated(self, conn: object) -> None:
        if conn is not self._signals:
            return  # an earlier connection, already replaced
        self._signals = None
        self._owner = None
        self._doubt()
        self.wake()


async def _take_owner_lock(conn: asyncpg.Connection) -> int:
    """A fresh random owner number, locked on `conn`. A number another live process holds
    is refused by the lock (and another drawn), so no two live owners ever share one."""
    while True:
        owner = secrets.randbelow(2**31 - 2) + 1  # a positive int4, as lease_owner is
        if await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", LEASE_LOCK_SPACE, owner):
            return owner
