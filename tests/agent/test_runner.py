"""The task runner: every task ends answered, re-queued, or failed with the user told."""

from __future__ import annotations

from collections.abc import Sequence

from agent.errors import CredentialRejected, ModelsUnavailable, NonTransientModelError, Route
from agent.ports import StoredMessage, Task
from agent.runner import FAILURE_NOTICE, TaskRunner
from tests.agent.memory import MemoryAlerts, MemoryHistory, MemoryPublisher, MemoryQueue

TASK = Task("T1:C1:1.0", "T1:C1:1.0", {"channel": "C1", "thread_ts": "1.0"})


def turn(task: Task = TASK, text: str = "question") -> StoredMessage:
    return StoredMessage(task.user_message_id, task.session_id, "user", "turn", text)


class Rig:
    def __init__(self, respond: object) -> None:
        self.queue, self.history = (
            MemoryQueue([TASK]),
            MemoryHistory([(TASK.user_message_id, turn())]),
        )
        self.publisher, self.alerts = MemoryPublisher(), MemoryAlerts()
        self.calls = 0

        async def responder(window: Sequence[StoredMessage]) -> str:
            self.calls += 1
            if isinstance(respond, Exception):
                raise respond
            return f"{respond}: {window[-1].text}"

        self.runner = TaskRunner(
            queue=self.queue,
            history=self.history,
            publisher=self.publisher,
            alerts=self.alerts,
            respond=responder,
        )


async def test_answered_task_is_stored_published_and_finished() -> None:
    """The reply is stored under task:{id}:reply, published once, and the task finished."""
    rig = Rig("answer")
    await rig.runner.run_task(TASK)
    assert rig.publisher.posts == [(TASK.reply_id, "answer: question")]
    assert rig.queue.finished == [TASK.id]
    assert (await rig.history.get(TASK.reply_id)) is not None


async def test_a_rerun_publishes_the_stored_reply_without_asking_the_model() -> None:
    """After a crash between storing and posting, the re-run posts the stored text."""
    rig = Rig("fresh inference")
    await rig.history.append(
        StoredMessage(TASK.reply_id, TASK.session_id, "assistant", "reply", "stored"),
        answers=TASK.user_message_id,
    )
    await rig.runner.run_task(TASK)
    assert rig.calls == 0 and rig.publisher.posts == [(TASK.reply_id, "stored")]


async def test_models_unavailable_requeues_the_task() -> None:
    """Every slot transiently down: the task goes back to the queue, not failed."""
    rig = Rig(ModelsUnavailable("all busy", retry_after=12.0))
    await rig.runner.run_task(TASK)
    assert rig.queue.retried == {TASK.id: 12.0} and not rig.queue.failed and not rig.publisher.posts


async def test_credential_refusal_alerts_the_operator_and_tells_the_user() -> None:
    """A refused credential: one alert, the failure notice in the thread, the task failed."""
    error = CredentialRejected(
        "refused", source="gateway", route=Route("openai", "m", 0), status_code=401
    )
    rig = Rig(error)
    await rig.runner.run_task(TASK)
    assert rig.alerts.alerts == [error]
    assert rig.publisher.posts == [(TASK.failure_id, FAILURE_NOTICE)]
    assert TASK.id in rig.queue.failed


async def test_other_model_failures_tell_the_user_without_internals() -> None:
    """A non-transient failure posts the configured notice, not the error text."""
    rig = Rig(NonTransientModelError("400 bad request: secret details"))
    await rig.runner.run_task(TASK)
    assert rig.publisher.posts == [(TASK.failure_id, FAILURE_NOTICE)] and not rig.alerts.alerts


async def test_unexpected_errors_are_retried_with_backoff() -> None:
    """A bug or an outage that is not the model's is retried later, not dropped."""
    rig = Rig(RuntimeError("slack is down"))
    await rig.runner.run_task(TASK)
    assert rig.queue.retried == {TASK.id: 2.0} and not rig.publisher.posts
