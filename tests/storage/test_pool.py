"""The connection pool: lends at most its size, takes back only what is usable, closes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

from storage import ConnectionPool
from storage.pool import PoolClosed
from tests.pg import with_database

PID = "SELECT pg_backend_pid()"
ALIVE = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"


@contextlib.asynccontextmanager
async def pool_of(dsn: str, size: int, **options: float) -> AsyncIterator[ConnectionPool]:
    async with ConnectionPool(dsn, min_size=0, max_size=size, **options) as pool:
        yield pool


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until `condition` holds, with a deadline."""
    async with asyncio.timeout(5):
        while not condition():  # noqa: ASYNC110 - the pool's own state, no event for it
            await asyncio.sleep(0)


async def gone(dsn: str, pid: int) -> None:
    """Wait (with a deadline) until the server has no backend `pid` any more."""
    admin = await asyncpg.connect(dsn)
    try:
        async with asyncio.timeout(10):
            while await admin.fetchval(ALIVE, pid):  # noqa: ASYNC110 - a server backend's exit, polled
                await asyncio.sleep(0.01)
    finally:
        await admin.close()


async def test_statements_in_a_row_share_one_connection(database_dsn: str) -> None:
    async with pool_of(database_dsn, 4) as pool:
        pids = {await pool.fetchval(PID) for _ in range(5)}
        assert len(pids) == 1
        assert pool.size == 1


async def test_never_more_connections_than_its_size(database_dsn: str) -> None:
    async with pool_of(database_dsn, 2) as pool:
        query = "SELECT pg_backend_pid() FROM pg_sleep(0.05)"
        pids = await asyncio.gather(*(pool.fetchval(query) for _ in range(6)))
        assert len(pids) == 6
        assert len(set(pids)) <= 2
        assert pool.size <= 2


async def test_it_says_whether_it_can_lend_without_waiting(database_dsn: str) -> None:
    """A pool can lend at once while a connection is idle or a place is free, not once
    every place is lent, and again once one comes back."""
    async with pool_of(database_dsn, 1) as pool:
        assert pool.available  # a free place
        async with pool.acquire():
            assert not pool.available
        assert pool.available  # an idle connection


async def test_a_connection_given_back_goes_to_the_task_waiting(database_dsn: str) -> None:
    async with pool_of(database_dsn, 1) as pool:
        async with pool.acquire() as conn:
            held = await conn.fetchval(PID)
            waiting = asyncio.ensure_future(pool.fetchval(PID))
            await until(lambda: pool.waiting == 1)
        assert await waiting == held
        assert pool.waiting == 0


async def test_each_wait_for_a_connection_is_reported(database_dsn: str) -> None:
    """`on_wait` hears how long a task waited because every connection was lent out; a
    task that found one free did not wait and is not reported."""
    waits: list[float] = []
    async with ConnectionPool(database_dsn, min_size=0, max_size=1, on_wait=waits.append) as pool:
        assert await pool.fetchval("SELECT 1") == 1
        assert waits == []
        async with pool.acquire():
            waiting = asyncio.ensure_future(pool.fetchval("SELECT 2"))
            await until(lambda: pool.waiting == 1)
            await asyncio.sleep(0.05)  # the wait being measured, not a synchronisation
        assert await waiting == 2
        assert len(waits) == 1 and waits[0] >= 0.05


async def test_a_server_error_keeps_the_connection(database_dsn: str) -> None:
    async with pool_of(database_dsn, 1) as pool:
        before = await pool.fetchval(PID)
        with pytest.raises(asyncpg.DivisionByZeroError):
            await pool.fetchval("SELECT 1 / 0")
        assert await pool.fetchval(PID) == before


async def test_a_connection_left_in_a_transaction_is_never_lent_again(database_dsn: str) -> None:
    async with pool_of(database_dsn, 1) as pool:
        async with pool.acquire() as conn:
            await conn.execute("BEGIN")
            left = await conn.fetchval(PID)
        await gone(database_dsn, left)
        assert await pool.fetchval(PID) != left
        assert await pool.fetchval("SELECT 1") == 1


async def test_a_statement_cut_off_by_a_timeout_leaves_the_pool_working(
    database_dsn: str,
) -> None:
    async with pool_of(database_dsn, 1) as pool:
        cut = await pool.fetchval(PID)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await pool.fetchval("SELECT pg_sleep(30)")
        assert await pool.fetchval("SELECT 41 + 1") == 42
        assert await pool.fetchval(PID) != cut
        await gone(database_dsn, cut)  # terminated, not left sleeping on the server


async def test_a_connection_being_closed_holds_its_place_until_it_is(database_dsn: str) -> None:
    """The server's connection limit is shared by every replica: a connection the pool is
    closing (its statement cut off, the cancel on its way) still counts toward the size,
    and the task waiting for a place opens a new one only once it is closed."""
    async with pool_of(database_dsn, 1) as pool:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1), pool.acquire() as cut:
                await cut.fetchval("SELECT pg_sleep(30)")
        assert pool.size == 1  # being closed, in the background
        async with pool.acquire() as conn:
            assert cut.is_closed()
            assert conn is not cut
        assert pool.size == 1


async def test_a_connection_the_server_ended_is_replaced(database_dsn: str) -> None:
    async with pool_of(database_dsn, 1) as pool:
        ended = await pool.fetchval(PID)
        admin = await asyncpg.connect(database_dsn)
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", ended)
        finally:
            await admin.close()
        await gone(database_dsn, ended)
        # The first statement may still meet the dead connection (as with any pool); it is
        # then dropped, and the next one runs on a new connection.
        with contextlib.suppress(asyncpg.InterfaceError, OSError):
            await pool.fetchval("SELECT 1")
        assert await pool.fetchval(PID) != ended
        assert pool.size == 1


async def test_a_waiter_that_gives_up_takes_no_place(database_dsn: str) -> None:
    async with pool_of(database_dsn, 1) as pool:
        async with pool.acquire():
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await pool.fetchval("SELECT 1")
        assert await pool.fetchval("SELECT 2") == 2
        assert pool.size == 1


async def test_a_failed_connect_frees_its_place(postgres_dsn: str) -> None:
    missing = with_database(postgres_dsn, "no_such_database_here")
    async with ConnectionPool(missing, min_size=0, max_size=1) as pool:
        for _ in range(2):  # the second attempt would wait forever if the first kept the place
            with pytest.raises(asyncpg.InvalidCatalogNameError):
                await pool.fetchval("SELECT 1")
        assert pool.size == 0


async def test_connections_idle_past_their_time_are_closed(database_dsn: str) -> None:
    async with pool_of(database_dsn, 3, idle_seconds=-1) as pool:
        query = "SELECT pg_backend_pid() FROM pg_sleep(0.05)"
        await asyncio.gather(*(pool.fetchval(query) for _ in range(3)))
        # Each connection given back after the first finds an older one idle: closed.
        await until(lambda: pool.size == 1)


async def test_close_waits_for_what_is_lent_then_lends_nothing(database_dsn: str) -> None:
    pool = ConnectionPool(database_dsn, min_size=1, max_size=2)
    await pool.open()
    release = asyncio.Event()

    async def borrower() -> int:
        async with pool.acquire() as conn:
            await release.wait()
            return int(await conn.fetchval("SELECT 7"))

    borrowed = asyncio.ensure_future(borrower())
    await until(lambda: pool.lent == 1)
    closing = asyncio.ensure_future(pool.close())
    await until(lambda: pool.closing)
    assert not closing.done()
    with pytest.raises(PoolClosed):
        await pool.fetchval("SELECT 1")
    release.set()
    assert await borrowed == 7
    await closing
    assert pool.size == 0
