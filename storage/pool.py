"""The work connections to Postgres: asyncpg connections kept in a list, lent and taken back.

Why not asyncpg's own `Pool`: a statement through it costs several times the client
CPU it costs through this one (BENCHMARKS.md), and every answered event runs many.
There every release runs in a task of its own (`asyncio.shield`), every acquire goes
through an `asyncio.Queue` and a proxy object wrapping the connection, and every release
re-arms an inactivity timer. Here an idle connection is popped from a list, and a returned
one is appended to it or handed straight to the task that waited longest.

What this keeps from asyncpg's pool, because our code relies on it:

- At most `max_size` connections, `min_size` of them opened with the pool; more are
  opened when every one is lent out, by the task that needs one. A connection being
  closed counts until it is: the server's `max_connections` is shared by every replica,
  and a burst of cut-off statements must not make one process hold more than its share.
- A connection is never lent again if it may be unusable: closed (the server went away,
  `pg_terminate_backend`), still in a transaction, or given back by a block that was
  cancelled or timed out, or met a connection-level error (a statement cut off mid-way
  leaves asyncpg cancelling it in the background). It is closed (the cancel sent first),
  and once it is, its place goes to the next task that needs one. A server-side error
  (`asyncpg.PostgresError`) leaves the connection as it was: its statement failed, the
  connection did not.
- Connections idle for `idle_seconds` beyond the first `min_size` are closed (looked at
  when a connection is given back, so a pool that grew for a burst shrinks after it).
- `close()` waits (up to `close_seconds`) for lent connections to come back, then closes
  everything; a pool that is closing lends nothing.

What it leaves out:

- **A reset on release** (asyncpg's default is four statements, once the largest share
  of our statements per task): connections come back as they were lent. Nothing here
  SETs, LISTENs or holds a session-level lock on a pooled connection (NOTIFYs are sent,
  and LISTEN and the owner lock live on the signal connection, storage/database.py), and
  one left in a transaction is terminated, not reset.
- `setup`/`init` hooks, and recycling a connection after `max_queries` statements.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self, TypeAlias

import asyncpg

PgConnection: TypeAlias = "asyncpg.Connection[asyncpg.Record]"

# A block that ended with one of these may have left its connection mid-statement.
_BREAKS_CONNECTION = (asyncio.CancelledError, TimeoutError, asyncpg.InterfaceError, OSError)


class PoolClosed(asyncpg.InterfaceError):
    """The pool is closing: it lends no more connections."""


class ConnectionPool:
    """Connections to one database, lent one task at a time (module docstring)."""

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int,
        max_size: int,
        server_settings: dict[str, str] | None = None,
        idle_seconds: float = 300.0,
        close_seconds: float = 10.0,
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        if not 0 <= min_size <= max_size or max_size < 1:
            raise ValueError(
                f"pool sizes must be 0 <= min ({min_size}) <= max ({max_size}), max >= 1"
            )
        self._dsn = dsn
        self._min = min_size
        self._max = max_size
        self._settings = dict(server_settings or {})
        self._idle_seconds = idle_seconds
        self._close_seconds = close_seconds
        # Told how long each wait for a connection took (a metric): only a task that found
        # every connection lent out waits, so the path of a free connection stays as it was.
        self._on_wait = on_wait
        # Idle connections, most recently returned last, each with when it came back.
        self._idle: deque[tuple[PgConnection, float]] = deque()
        self._lent: set[PgConnection] = set()
        self._opening = 0  # places taken by connections being opened
        # Tasks waiting for a connection, longest first. A waiter is given a connection,
        # or None: a place is free, open one.
        self._waiters: deque[asyncio.Future[PgConnection | None]] = deque()
        self._closers: set[asyncio.Task[None]] = set()  # each holds its place until closed
        self._closing = False
        self._all_back = asyncio.Event()

    @property
    def size(self) -> int:
        """Connections open, being opened, or being closed."""
        return len(self._idle) + len(self._lent) + self._opening + len(self._closers)

    @property
    def max_size(self) -> int:
        return self._max

    @property
    def lent(self) -> int:
        """Connections lent out now."""
        return len(self._lent)

    @property
    def waiting(self) -> int:
        """Tasks waiting for a connection (every one is lent out)."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    @property
    def available(self) -> bool:
        """Whether a connection can be lent now without waiting for one to come back."""
        return not self._closing and (bool(self._idle) or self.size < self._max)

    @property
    def closing(self) -> bool:
        return self._closing

    async def open(self) -> None:
        """Open the first `min_size` connections; raises what connecting raised."""
        self._opening += self._min
        results = await asyncio.gather(
            *(self._connect() for _ in range(self._min)), return_exceptions=True
        )
        self._opening -= self._min
        now = time.monotonic()
        failure: BaseException | None = None
        for result in results:
            if isinstance(result, BaseException):
                failure = failure or result
            else:
                self._idle.append((result, now))
        if failure is not None:
            await self.close()
            raise failure

    def acquire(self) -> _Lending:
        """`async with pool.acquire() as conn:` a connection of this pool's for the block.
        It waits as long as every connection is lent out: bound it with `asyncio.timeout`
        around the block."""
        return _Lending(self)

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with _Lending(self) as conn:
            return await conn.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with _Lending(self) as conn:
            return await conn.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        async with _Lending(self) as conn:
            return await conn.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        async with _Lending(self) as conn:
            return await conn.execute(query, *args)

    async def close(self) -> None:
        """Lend nothing more; close the idle connections, wait up to `close_seconds` for the
        lent ones to come back (each is closed as it does), terminate those that do not."""
        self._closing = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(PoolClosed("the database pool is closing"))
        idle = [conn for conn, _ in self._idle]
        self._idle.clear()
        await asyncio.gather(*(_close(conn) for conn in idle))
        if self._lent:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._close_seconds):
                    while self._lent:  # `_give` sets the event once the last one is back
                        self._all_back.clear()
                        await self._all_back.wait()
            for conn in list(self._lent):
                conn.terminate()
            self._lent.clear()
        if self._closers:
            await asyncio.gather(*self._closers, return_exceptions=True)

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # Lending and taking back

    async def _take(self) -> PgConnection:
        if self._closing:
            raise PoolClosed("the database pool is closing")
        while self._idle:
            conn, _ = self._idle.pop()  # the most recently used: the oldest may time out
            if not conn.is_closed():
                self._lent.add(conn)
                return conn
        if self.size < self._max:
            return await self._open_one()
        waiter: asyncio.Future[PgConnection | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        began = time.monotonic()
        try:
            handed_here = await waiter
        except BaseException:  # cancelled (a caller's timeout, a shutdown), or closing
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # Handed a connection (or a place) just as this task stopped waiting: it
                # goes to the next waiter instead.
                handed = waiter.result()
                if handed is None:
                    self._opening -= 1
                else:
                    self._lent.discard(handed)
                self._pass_on(handed)
            raise
        finally:
            if self._on_wait is not None:
                self._on_wait(time.monotonic() - began)
        if handed_here is None:  # a place came free: `_pass_on` reserved it for this task
            self._opening -= 1
            return await self._open_one()
        return handed_here

    async def _open_one(self) -> PgConnection:
        self._opening += 1
        try:
            conn = await self._connect()
        except BaseException:
            self._opening -= 1
            self._pass_on(None)  # the place is free again: a waiter may try
            raise
        self._opening -= 1
        if self._closing:
            await _close(conn)
            raise PoolClosed("the database pool is closing")
        self._lent.add(conn)
        return conn

    async def _connect(self) -> PgConnection:
        return await asyncpg.connect(self._dsn, server_settings=self._settings)

    def _give(self, conn: PgConnection, *, broken: bool) -> None:
        """Take `conn` back from its borrower (never suspends, so a cancelled borrower
        still gives it back)."""
        self._lent.discard(conn)
        if broken or conn.is_closed() or conn.is_in_transaction():
            # Closed politely in the background: asyncpg first sends the cancel of a
            # statement cut off mid-way, which `terminate` would drop, leaving the
            # statement running on the server. Its place is free once it is closed.
            self._close_later(conn)
        elif self._closing:
            self._close_later(conn)
        else:
            self._pass_on(conn)
        if self._closing and not self._lent:
            self._all_back.set()

    def _pass_on(self, conn: PgConnection | None) -> None:
        """Hand `conn` (None: a free place) to the longest waiter, or keep it idle."""
        if self._closing:
            if conn is not None:
                self._close_later(conn)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if waiter.done():  # timed out or cancelled meanwhile
                continue
            if conn is None:
                self._opening += 1  # held for the waiter, which opens it
            else:
                self._lent.add(conn)
            waiter.set_result(conn)
            return
        if conn is None:
            return
        now = time.monotonic()
        self._idle.append((conn, now))
        oldest, since = self._idle[0]
        if (
            len(self._idle) > 1  # never the one just given back
            and now - since > self._idle_seconds
            and len(self._idle) + len(self._lent) > self._min
        ):
            self._idle.popleft()
            self._close_later(oldest)

    def _close_later(self, conn: PgConnection) -> None:
        closer = asyncio.get_running_loop().create_task(_close(conn))
        self._closers.add(closer)
        closer.add_done_callback(self._closed)

    def _closed(self, closer: asyncio.Task[None]) -> None:
        self._closers.discard(closer)
        self._pass_on(None)  # its place is free: a waiter may open a connection in it


class _Lending:
    """One loan of a connection: taken on entering the block, given back on leaving it, as
    unusable if the block was cut off (`_BREAKS_CONNECTION`). A class rather than
    `contextlib.asynccontextmanager`, because every statement goes through one: a loan is
    one small object and two calls, not a generator driven through its steps."""

    __slots__ = ("_conn", "_pool")

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    async def __aenter__(self) -> PgConnection:
        self._conn = await self._pool._take()
        return self._conn

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._pool._give(self._conn, broken=isinstance(e, _BREAKS_CONNECTION))


async def _close(conn: PgConnection) -> None:
    """Close `conn` politely (the server sees a Terminate, not a dropped socket), or cut it."""
    try:
        async with asyncio.timeout(5):
            await conn.close()
    except (Exception, asyncio.CancelledError):
        conn.terminate()
