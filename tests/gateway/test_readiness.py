"""`/readyz` costs at most one database query per interval, however many ask at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AsyncExitStack

import aiohttp

from gateway.process.http import build_health_app, listen
from gateway.telemetry.readiness import READY_SECONDS, CachedReadiness
from storage import Database


class CountedCheck:
    """The database's real readiness query, counted; held at `gate` while it is closed."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.queries = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self) -> bool:
        self.queries += 1
        await self.gate.wait()
        return await self.db.is_ready()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def flood(http: aiohttp.ClientSession, url: str, count: int) -> list[tuple[int, str]]:
    async def one() -> tuple[int, str]:
        async with http.get(url) as response:
            return response.status, await response.text()

    return await asyncio.gather(*(one() for _ in range(count)))


async def eventually(condition: Callable[[], bool], timeout: float = 30) -> None:  # noqa: ASYNC109
    """Wait for `condition()` with a deadline (a request reaching the server)."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - a request's arrival, polled
            await asyncio.sleep(0.01)


async def test_a_flood_of_readyz_costs_one_query_per_interval(db: Database) -> None:
    """200 requests at once while the first check is held: all answered ready, one query;
    once the interval has passed, the next flood makes one more."""
    check, clock = CountedCheck(db), Clock()
    ready = CachedReadiness(check, clock=clock)
    async with AsyncExitStack() as stack, aiohttp.ClientSession() as http:
        port = await listen(stack, build_health_app(ready), "127.0.0.1", 0)
        url = f"http://127.0.0.1:{port}/readyz"
        check.gate.clear()
        answers = asyncio.ensure_future(flood(http, url, 200))
        await eventually(lambda: check.queries == 1)
        check.gate.set()
        assert await answers == [(200, "ready")] * 200
        assert check.queries == 1
        clock.now += READY_SECONDS
        assert await flood(http, url, 50) == [(200, "ready")] * 50
        assert check.queries == 2


async def test_a_changed_answer_shows_after_the_interval() -> None:
    """A database that went away is seen at the next interval, and so is its return."""
    answers = iter([True, False, True])
    clock = Clock()

    async def check() -> bool:
        return next(answers)

    ready = CachedReadiness(check, clock=clock)
    seen = [await ready(), await ready()]
    clock.now += READY_SECONDS
    seen += [await ready(), await ready()]
    clock.now += READY_SECONDS
    seen.append(await ready())
    assert seen == [True, True, False, False, True]


async def test_a_check_cancelled_with_its_request_leaves_the_next_to_ask(db: Database) -> None:
    """A request that goes away while it holds the check does not leave the others
    waiting on an answer that never comes: the next one asks."""
    check = CountedCheck(db)
    ready = CachedReadiness(check, clock=Clock())
    check.gate.clear()
    first = asyncio.ensure_future(ready())
    await eventually(lambda: check.queries == 1)
    second = asyncio.ensure_future(ready())
    first.cancel()
    check.gate.set()
    assert await second is True
    assert check.queries == 2
