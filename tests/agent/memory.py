"""In-memory implementations of the agent's ports, for testing the runner without I/O."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent.ports import StoredMessage, Task
from storage.history import trim_to_budget


@dataclass
class MemoryQueue:
    tasks: list[Task] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    retried: dict[str, float] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def claim(self) -> Task | None:
        if not self.tasks:
            return None
        task = self.tasks.pop(0)
        return dataclasses.replace(task, attempts=task.attempts)

    async def heartbeat(self, task: Task) -> bool:
        return True

    async def finish(self, task: Task) -> None:
        self.finished.append(task.id)
        self.changed.set()

    async def fail(self, task: Task, reason: str) -> None:
        self.failed[task.id] = reason
        self.changed.set()

    async def retry_later(self, task: Task, delay: float, reason: str) -> None:
        self.retried[task.id] = delay
        self.changed.set()

    async def wait_for_work(self, max_wait: float) -> None:
        await asyncio.sleep(0)


@dataclass
class MemoryHistory:
    messages: list[tuple[str, StoredMessage]] = field(default_factory=list)

    async def get(self, message_id: str) -> StoredMessage | None:
        return next((m for _, m in self.messages if m.id == message_id), None)

    async def append(self, message: StoredMessage, *, answers: str) -> StoredMessage:
        existing = await self.get(message.id)
        if existing is not None:
            return existing
        self.messages.append((answers, message))
        return message

    async def window(
        self, task: Task, *, max_chars: int, max_messages: int
    ) -> Sequence[StoredMessage]:
        mine = [m for _, m in self.messages if m.session_id == task.session_id]
        return trim_to_budget(list(reversed(mine))[:max_messages], task.user_message_id, max_chars)


@dataclass
class MemoryPublisher:
    posts: list[tuple[str, str]] = field(default_factory=list)
    started: list[str] = field(default_factory=list)

    async def publish(self, task: Task, message_id: str, text: str) -> None:
        if all(existing != message_id for existing, _ in self.posts):
            self.posts.append((message_id, text))

    async def task_started(self, task: Task) -> None:
        self.started.append(task.id)


@dataclass
class MemoryAlerts:
    alerts: list[Exception] = field(default_factory=list)

    async def credential_failure(self, task: Task, error: Exception) -> None:
        self.alerts.append(error)
