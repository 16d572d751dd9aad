"""Stopping helper tasks without swallowing our own cancellation.

The usual `task.cancel(); with suppress(CancelledError): await task` has a trap: if the
*caller* is cancelled while it waits (a worker being shut down while it stops its
heartbeat), the suppress eats the caller's cancellation too, and the worker runs on —
shutdown then hangs. `asyncio.wait` never raises the awaited task's exception, so only a
cancellation of the caller itself propagates.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


async def stop_task(task: asyncio.Task[Any]) -> None:
    """Cancel `task` and wait until it has finished; a cancellation of the caller propagates."""
    task.cancel()
    await asyncio.wait([task])


class Supervisor:
    """Keeps a reference to every background task it starts, and cancels them on close.

    asyncio holds only weak references to tasks: a fire-and-forget task may be collected
    mid-flight, and nothing cancels it at shutdown. Work that must not block its caller
    (an alert while an API call is being answered) runs here instead.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    async def aclose(self) -> None:
        for task in list(self._tasks):
            await stop_task(task)
