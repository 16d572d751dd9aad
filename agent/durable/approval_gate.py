"""Where the runner meets people deciding on tool calls (agent/core/approval.py): a
task's latest pause read back, a paused round stored with one request per call, people
asked at the desk, and their decisions shown where they were asked.

Apart from the runner because it is one feature with its own two ports (the store and
the desk) and one setting (the time-out), which a run consults at three points only.
"""

from __future__ import annotations

from agent.core.approval import (
    ApprovalDesk,
    ApprovalRequest,
    ApprovalStore,
    Paused,
    PausedRound,
)
from agent.core.ids import approval_id
from agent.core.ports import Task


class ApprovalGate:
    """A runner's pauses: stored in `store`, asked at `desk` (without one, nobody is
    asked: the time-out decides), given `timeout_seconds` to be decided."""

    def __init__(
        self, store: ApprovalStore | None, desk: ApprovalDesk | None, timeout_seconds: float
    ) -> None:
        self._store = store
        self._desk = desk
        self._timeout = timeout_seconds

    async def latest(self, task: Task) -> PausedRound | None:
        """The task's latest pause (only a lease stores one: a first attempt has none)."""
        if self._store is None or task.attempts <= 1:
            return None
        return await self._store.paused(task)

    async def pause(
        self, task: Task, number: int, latest: PausedRound | None, paused: Paused
    ) -> None:
        """Store the paused round with one request per call that needs a person, ask
        them, and release the task until they decided."""
        assert self._store is not None  # such tools are offered only with a store
        n = latest.number + 1 if latest is not None else 0
        requests = tuple(
            ApprovalRequest(approval_id(task.id, n, i), call.call_id, call.tool, call.arguments)
            for i, call in enumerate(paused.calls)
        )
        stored = await self._store.pause(
            task, PausedRound(n, number, paused.state, requests), timeout_seconds=self._timeout
        )
        await self.wait_for_people(task, stored)

    async def wait_for_people(self, task: Task, paused: PausedRound) -> None:
        """Ask for every undecided request (the outbox posts each once: asking again
        after a crash is free), then release the task until all are decided."""
        assert self._store is not None
        if self._desk is not None:
            for request in paused.undecided:
                await self._desk.ask(task, request)
        await self._store.await_decisions(task)

    async def show_decisions(self, task: Task, paused: PausedRound | None) -> None:
        """Show each decision where its request was asked (display only)."""
        if paused is None or self._desk is None:
            return
        for request in paused.requests:
            if (decision := paused.decisions.get(request.id)) is not None:
                await self._desk.show(task, request, decision)
