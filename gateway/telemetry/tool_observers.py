"""Watching work-tool calls from several places at once.

The agent tells one `agent.ToolObserver` about each tool call; the gateway has several
that want to know (the stored record in `storage.PostgresToolCalls`, the counter in
`gateway.telemetry.metrics`, the thread's display). `ToolObservers` hands each record to all of
them, in order; one that fails is logged and does not keep the others from hearing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from agent import Task, ToolCallRecord, ToolObserver

log = logging.getLogger(__name__)


class ToolObservers:
    """One `ToolObserver` made of several."""

    def __init__(self, observers: Iterable[ToolObserver]) -> None:
        self._observers = list(observers)

    def add(self, observer: ToolObserver) -> None:
        self._observers.append(observer)

    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        for observer in self._observers:
            try:
                await observer.tool_call(task, record)
            except Exception:
                log.warning(
                    "%s failed on tool call %s (%s)",
                    type(observer).__name__,
                    record.name,
                    record.state,
                    exc_info=True,
                )
