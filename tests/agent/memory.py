"""In-memory implementations of the agent's ports, for testing the runner without I/O."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from agent.core.citations import Citation
from agent.core.delegation import (
    Delegation,
    RoundRecord,
    RoundState,
    Subtask,
    SubtaskOutcome,
    SubtaskState,
)
from agent.core.ports import (
    NOTHING_DELIVERED,
    AnswerOrigin,
    Delivered,
    Showing,
    Step,
    StoredMessage,
    Task,
    TaskQueue,
    Window,
)
from storage.history import trim_to_budget


@dataclass
class MemoryQueue:
    tasks: list[Task] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    retried: dict[str, float] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    delivered: list[tuple[str, str | None]] = field(default_factory=list)  # recorded by finish

    async def claim(self) -> Task | None:
        if not self.tasks:
            return None
        task = self.tasks.pop(0)
        return dataclasses.replace(task, attempts=task.attempts)

    async def heartbeat(self, task: Task) -> bool:
        return True

    async def cancelled(self, task: Task) -> bool:
        return False

    async def interrupted(self, task: Task) -> bool:
        return False

    async def finish(self, task: Task, delivered: Delivered = NOTHING_DELIVERED) -> None:
        self.finished.append(task.id)
        self.delivered.extend(delivered.posts)
        self.changed.set()

    async def fail(self, task: Task, reason: str) -> None:
        self.failed[task.id] = reason
        self.changed.set()

    async def retry_later(self, task: Task, delay: float, reason: str) -> None:
        self.retried[task.id] = delay
        self.changed.set()

    async def wait_for_work(self, max_wait: float) -> None:
        await asyncio.sleep(0)

    def dropped_wakeups(self) -> int:
        return 0  # waiting for work is a turn of the loop: nothing to drop

    async def leases_in_doubt(self) -> None:
        await asyncio.Event().wait()  # leases in memory are never lost that way


@dataclass
class MemoryHistory:
    messages: list[tuple[str, StoredMessage]] = field(default_factory=list)

    async def get(self, message_id: str) -> StoredMessage | None:
        return next((m for _, m in self.messages if m.id == message_id), None)

    origins: dict[str, AnswerOrigin] = field(default_factory=dict)

    async def append(
        self,
        message: StoredMessage,
        *,
        answers: str,
        origin: AnswerOrigin | None = None,
        lease: Task | None = None,  # leases in memory are never lost
    ) -> StoredMessage:
        existing = await self.get(message.id)
        if existing is not None:
            return existing
        self.messages.append((answers, message))
        if origin is not None:
            self.origins[message.id] = origin
        return message

    async def window(self, task: Task, *, max_chars: int, max_messages: int) -> Window:
        mine = [m for _, m in self.messages if m.session_id == task.session_id]
        kept = trim_to_budget(list(reversed(mine))[:max_messages], task.user_message_id, max_chars)
        return Window(tuple(kept), complete=len(kept) == len(mine))


@dataclass
class MemoryPublisher:
    posts: list[tuple[str, str]] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    steps: list[tuple[str, tuple[Step, ...]]] = field(default_factory=list)
    citations: dict[str, tuple[Citation, ...]] = field(default_factory=dict)

    async def publish(
        self,
        task: Task,
        message_id: str,
        text: str,
        *,
        steps: Sequence[Step] = (),
        citations: Sequence[Citation] = (),
        finishing: bool = False,
    ) -> Delivered:
        if steps:
            self.steps.append((message_id, tuple(steps)))
        if all(existing != message_id for existing, _ in self.posts):
            self.posts.append((message_id, text))
            if citations:
                self.citations[message_id] = tuple(citations)
        # Finishing, the post is left to the task's finish to record (`MemoryQueue.delivered`).
        return Delivered(((message_id, None),)) if finishing else NOTHING_DELIVERED

    @contextlib.asynccontextmanager
    async def working(self, task: Task) -> AsyncIterator[None]:
        self.started.append(task.id)
        yield


@dataclass
class MemoryDraft:
    """What a draft was shown: every append, and a marker for every discard; it starts
    to show (tells `showing`) at its first append, and again at the first after a discard."""

    events: list[str] = field(default_factory=list)
    showing: Showing = field(default_factory=Showing)

    async def append(self, text: str) -> None:
        if not self.visible:
            self.showing.shown()
        self.events.append(text)

    async def discard(self) -> None:
        self.events.append(DISCARDED)

    @property
    def visible(self) -> str:
        """What is shown now: the appends since the last discard."""
        shown: list[str] = []
        for event in self.events:
            shown = [] if event is DISCARDED else [*shown, event]
        return "".join(shown)


DISCARDED = "<discarded>"


@dataclass
class MemoryLiveView:
    drafts: dict[str, MemoryDraft] = field(default_factory=dict)
    steps: list[tuple[str, Step]] = field(default_factory=list)

    def draft(self, task: Task, message_id: str) -> MemoryDraft:
        return self.drafts.setdefault(message_id, MemoryDraft())

    async def step(self, task: Task, message_id: str, step: Step) -> None:
        self.steps.append((message_id, step))


@dataclass
class MemoryAlerts:
    alerts: list[Exception] = field(default_factory=list)

    delivered: bool = True

    async def credential_failure(self, task: Task, error: Exception) -> bool:
        self.alerts.append(error)
        return self.delivered


@dataclass
class MemoryDelegations:
    """Delegation in memory: rounds, subtasks and their outcomes, no leases."""

    delegations: dict[tuple[str, int], Delegation] = field(default_factory=dict)
    outcomes: dict[tuple[str, int, int], tuple[SubtaskState, str]] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    tasks: dict[str, Task] = field(default_factory=dict)

    async def load(self, task: Task) -> RoundState:
        finished: list[RoundRecord] = []
        for number in range(len([k for k in self.delegations if k[0] == task.id])):
            d = self.delegations[(task.id, number)]
            results = [self.outcomes.get((task.id, number, i)) for i in range(len(d.subtasks))]
            if any(r is None for r in results):
                return RoundState(tuple(finished), d)
            outcomes = tuple(
                SubtaskOutcome(i, s.type, r[0], r[1])
                for i, (s, r) in enumerate(zip(d.subtasks, results, strict=True))
                if r
            )
            finished.append(RoundRecord(number, d.call_id, d.raw_arguments, outcomes))
        return RoundState(tuple(finished), None)

    async def record(
        self, task: Task, number: int, delegation: Delegation, *, timeout_seconds: float
    ) -> Delegation:
        self.tasks[task.id] = task
        return self.delegations.setdefault((task.id, number), delegation)

    async def await_subtasks(self, task: Task) -> None:
        self.waiting.append(task.id)

    async def claim_subtask(self) -> tuple[Subtask, Task] | None:
        for (task_id, number), d in sorted(self.delegations.items()):
            for index, request in enumerate(d.subtasks):
                if (
                    task_id,
                    number,
                    index,
                ) not in self.outcomes and f"{task_id}:{number}:{index}" not in self.retried:
                    return Subtask(task_id, number, index, request), self.tasks[task_id]
        return None

    async def claim_next(self, tasks: TaskQueue) -> tuple[Subtask, Task] | Task | None:
        return await self.claim_subtask() or await tasks.claim()

    async def heartbeat_subtask(self, subtask: Subtask) -> bool:
        return True

    async def settle_subtask(self, subtask: Subtask, state: SubtaskState, text: str) -> None:
        self.outcomes[(subtask.task_id, subtask.round, subtask.index)] = (state, text)

    async def retry_subtask_later(self, subtask: Subtask, delay: float) -> None:
        self.retried.append(subtask.id)
