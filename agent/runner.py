"""The task runner: workers that lease tasks, answer them, and deliver the answer once.

Each worker loops: claim a task, answer it under a heartbeat, publish, finish. Answering
is idempotent across crashes: the reply is stored under `task:{id}:reply` before it is
published, a re-run that finds it stored publishes the stored text instead of asking the
model again, and the publisher delivers each message id once.

How a task ends:
- answered: the reply is published and the task is done;
- every model slot transiently down (`ModelsUnavailable`): queued again for later;
- a credential or quota refused: the operator is alerted, the user told, the task failed;
- any other agent failure: the user is told, the task failed;
- an unexpected error (Slack down, a bug): retried with backoff, failed after a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from agent.errors import AgentError, CredentialRejected, ModelsUnavailable, QuotaExhausted
from agent.ports import AlertSink, History, Publisher, StoredMessage, Task, TaskQueue

log = logging.getLogger(__name__)

Responder = Callable[[Sequence[StoredMessage]], Awaitable[str]]

FAILURE_NOTICE = "Sorry, I couldn't answer this message. The operators have been notified."


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    workers: int = 4
    heartbeat_seconds: float = 10.0
    history_chars: int = 24_000
    history_messages: int = 100
    max_attempts: int = 5
    retry_base_seconds: float = 2.0
    retry_max_seconds: float = 300.0
    failure_notice: str = FAILURE_NOTICE


DEFAULT_RUNNER = RunnerSettings()


class TaskRunner:
    def __init__(
        self,
        *,
        queue: TaskQueue,
        history: History,
        publisher: Publisher,
        alerts: AlertSink,
        respond: Responder,
        settings: RunnerSettings = DEFAULT_RUNNER,
    ) -> None:
        self._queue = queue
        self._history = history
        self._publisher = publisher
        self._alerts = alerts
        self._respond = respond
        self._settings = settings
        self._workers: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        for n in range(self._settings.workers):
            worker = asyncio.create_task(self._work(), name=f"threadgate-worker-{n}")
            self._workers.add(worker)
            worker.add_done_callback(self._workers.discard)

    async def stop(self) -> None:
        """Cancel the workers; a task cut short keeps its lease row and resumes elsewhere."""
        for worker in list(self._workers):
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    async def _work(self) -> None:
        while True:
            try:
                task = await self._queue.claim()
            except Exception:  # the database may be restarting: wait, then try again
                log.exception("claiming a task failed")
                await self._queue.wait_for_work(self._settings.heartbeat_seconds)
                continue
            if task is None:
                await self._queue.wait_for_work(self._settings.heartbeat_seconds * 6)
                continue
            await self.run_task(task)

    async def run_task(self, task: Task) -> None:
        """Answer one leased task and settle it, whatever happens."""
        async with self._heartbeat(task):
            try:
                await self._answer(task)
            except ModelsUnavailable as exc:
                await self._queue.retry_later(
                    task, exc.retry_after or self._backoff(task), str(exc)
                )
            except (CredentialRejected, QuotaExhausted) as exc:
                await self._alerts.credential_failure(task, exc)
                await self._give_up(task, exc)
            except AgentError as exc:
                await self._give_up(task, exc)
            except Exception as exc:
                log.exception("task %s failed unexpectedly (attempt %d)", task.id, task.attempts)
                await self._retry_or_give_up(task, exc)

    async def _answer(self, task: Task) -> None:
        await self._publisher.task_started(task)
        reply = await self._history.get(task.reply_id)
        if reply is None:
            window = await self._history.window(
                task,
                max_chars=self._settings.history_chars,
                max_messages=self._settings.history_messages,
            )
            text = await self._respond(window)
            draft = StoredMessage(task.reply_id, task.session_id, "assistant", "reply", text)
            reply = await self._history.append(draft, answers=task.user_message_id)
        await self._publisher.publish(task, reply.id, reply.text)
        await self._queue.finish(task)

    async def _give_up(self, task: Task, error: Exception) -> None:
        log.warning("task %s failed: %s", task.id, error)
        try:
            await self._publisher.publish(task, task.failure_id, self._settings.failure_notice)
        finally:
            await self._queue.fail(task, f"{type(error).__name__}: {error}")

    async def _retry_or_give_up(self, task: Task, error: Exception) -> None:
        with contextlib.suppress(Exception):
            if task.attempts < self._settings.max_attempts:
                await self._queue.retry_later(task, self._backoff(task), type(error).__name__)
            else:
                await self._give_up(task, error)

    def _backoff(self, task: Task) -> float:
        s = self._settings
        return float(min(s.retry_max_seconds, s.retry_base_seconds * 2 ** (task.attempts - 1)))

    @contextlib.asynccontextmanager
    async def _heartbeat(self, task: Task) -> AsyncIterator[None]:
        beat = asyncio.create_task(self._beat(task), name=f"heartbeat-{task.id}")
        try:
            yield
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _beat(self, task: Task) -> None:
        while True:
            await asyncio.sleep(self._settings.heartbeat_seconds)
            with contextlib.suppress(Exception):
                if not await self._queue.heartbeat(task):
                    log.warning("task %s: lease lost to another worker", task.id)
