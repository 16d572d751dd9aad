"""`/readyz` at a bounded cost: one database check per interval, whoever asks.

`/readyz` is anonymous — an orchestrator's probe, but anyone who can reach the port too —
and its database check takes a pooled connection for a query (`Database.is_ready`). A
flood of requests would each cost a query and compete with admissions for connections.
So the database's answer is kept for `READY_SECONDS` (1 s: a probe every few seconds
still sees a database that went away within one), and while a check runs, every request
that arrives waits for that check instead of starting its own: a flood costs one query per
interval. What costs nothing (the Socket Mode link, the workers' start) is asked each time.
A check cancelled with its request (the client went away) leaves the next waiter to ask.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

READY_SECONDS = 1.0


class CachedReadiness:
    """`ready()` asked at most once per `seconds`; between, the last answer."""

    def __init__(
        self,
        ready: Callable[[], Awaitable[bool]],
        seconds: float = READY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ready = ready
        self._seconds = seconds
        self._clock = clock
        self._answer: tuple[float, bool] | None = None
        self._asking = asyncio.Lock()

    async def __call__(self) -> bool:
        if (fresh := self._fresh()) is not None:
            return fresh
        async with self._asking:
            if (fresh := self._fresh()) is not None:  # answered while this one waited
                return fresh
            answer = await self._ready()
            self._answer = (self._clock(), answer)
            return answer

    def _fresh(self) -> bool | None:
        if self._answer is None or self._clock() - self._answer[0] >= self._seconds:
            return None
        return self._answer[1]
