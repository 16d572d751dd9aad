"""Run work while its lease holds; the first heartbeat that finds the lease lost cancels
the work wherever it is (a model call, a wait for Slack).

Apart from the runner because a task and a subtask are leased the same way (only their
heartbeat differs), and because the cancellation is easy to get wrong: the body runs in a
cancel scope with no deadline, which the beat that finds the lease lost moves to now, and
the cancellation ends at the scope, so the worker goes on to its next task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from agent.durable.background import stop_task

log = logging.getLogger(__name__)

Beat = Callable[[], Awaitable[bool]]


@contextlib.asynccontextmanager
async def leased(
    beat: Beat, name: str, *, in_doubt: Callable[[], Awaitable[None]], every: float
) -> AsyncIterator[None]:
    """Run the body while `beat` (due `every` seconds, or at once when `in_doubt`
    returns: every lease of the process may just have been lost) says the lease holds."""
    lost = False
    try:
        # A cancel scope: no deadline until a beat finds the lease lost.
        async with asyncio.timeout(None) as scope:

            def cancel() -> None:
                nonlocal lost
                lost = True
                scope.reschedule(asyncio.get_running_loop().time())

            beating = asyncio.create_task(
                _beat(beat, name, cancel, in_doubt, every), name=f"heartbeat-{name}"
            )
            try:
                yield
            finally:
                await stop_task(beating)
    except TimeoutError:
        if not lost:
            raise
        log.warning("%s: lease lost; its run was cancelled", name)


async def _beat(
    beat: Beat,
    name: str,
    lost: Callable[[], None],
    in_doubt: Callable[[], Awaitable[None]],
    every: float,
) -> None:
    while True:
        # The next beat is due, or every lease of this process may just have been lost.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(every):
                await in_doubt()
        try:
            held = await beat()
        except Exception:  # the database may be restarting: the next beat will tell
            continue
        if not held:
            log.warning("%s: lease lost to another worker", name)
            lost()
            return
