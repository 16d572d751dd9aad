"""What a task runner is built from: the responder it asks, the ports it works through,
its settings, and the observer it tells how work ends.

Apart from the runner so that the parts it hands work to (subtask runs, agent/durable/
subtask_runs.py; retry timing, agent/durable/pacing.py) can take the same values without
importing the runner that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agent.core.approval import DEFAULT_APPROVAL_TIMEOUT_SECONDS, ApprovalDesk, ApprovalStore
from agent.core.delegation import (
    DEFAULT_SUBTASK_TIMEOUT_SECONDS,
    DelegationStore,
    RoundInput,
    Subtask,
)
from agent.core.ports import (
    AlertSink,
    History,
    LiveView,
    Memory,
    ModelWait,
    ModelWaits,
    PromptEpoch,
    Publisher,
    Task,
    TaskQueue,
)
from agent.core.tracing import NO_TRACER, Tracer
from agent.durable.compaction import DEFAULT_HISTORY_CHARS
from agent.durable.notices import DEFAULT_NOTICES, FailureNotices
from agent.rounds.control import Decision

# What a thread is told, once, when someone stopped the work in it.
STOPPED_NOTE = "Stopped. I won't carry on with that; send a new message whenever you like."


class Responder(Protocol):
    """What the runner needs from the agent: run a round, run a subtask."""

    async def __call__(self, round_input: RoundInput) -> Decision: ...

    async def pin_prompt(self, task: Task) -> PromptEpoch:
        """The system prompt the task's session is pinned to (pinned now if it is new)."""
        ...

    async def run_subtask(self, subtask: Subtask, task: Task) -> str: ...


class RunnerObserver(Protocol):
    """Hears how work ends, for metrics. Every method must be cheap and never raise."""

    def task_settled(self, outcome: str) -> None: ...

    def round_decided(self, decision: str) -> None: ...

    def subtask_settled(self, state: str) -> None: ...

    def schedule_run_settled(self, outcome: str) -> None:
        """A schedule's run ended: `posted`, `silent` or `failed`."""

    def reply_answered(self, messages: int) -> None:
        """A reply was posted for `messages` messages: its task's own and those it covered
        (storage/thread_queue.py), or taken while it ran (agent/rounds/steering.py)."""


class Unobserved:
    """The observer of a runner given none: hears everything, tells nobody."""

    def task_settled(self, outcome: str) -> None:
        pass

    def round_decided(self, decision: str) -> None:
        pass

    def subtask_settled(self, state: str) -> None:
        pass

    def schedule_run_settled(self, outcome: str) -> None:
        pass

    def reply_answered(self, messages: int) -> None:
        pass


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    # Workers mostly wait (on the model, on Slack), so many are cheap.
    workers: int = 16
    heartbeat_seconds: float = 10.0
    history_chars: int = DEFAULT_HISTORY_CHARS
    history_messages: int = 100
    max_rounds: int = 4
    subtask_timeout_seconds: float = DEFAULT_SUBTASK_TIMEOUT_SECONDS
    max_attempts: int = 5
    retry_base_seconds: float = 2.0
    retry_max_seconds: float = 300.0
    max_deferrals: int = 5
    max_deferral_seconds: float = 180.0
    still_trying_seconds: float = 30.0
    task_timeout_seconds: float = 900.0
    notices: FailureNotices = DEFAULT_NOTICES
    approval_timeout_seconds: float = DEFAULT_APPROVAL_TIMEOUT_SECONDS
    stopped_note: str = STOPPED_NOTE


DEFAULT_RUNNER = RunnerSettings()


@dataclass(frozen=True, slots=True)
class RunnerPorts:
    """What the runner works through: the stores it leases, reads and writes, where it
    posts and alerts, and, optionally, what shows and records its work. Without
    `approvals` no round pauses; without a `desk` nobody is asked (agent/core/approval.py)."""

    queue: TaskQueue
    delegations: DelegationStore
    history: History
    publisher: Publisher
    alerts: AlertSink
    observer: RunnerObserver | None = None
    live: LiveView | None = None
    memory: Memory | None = None
    approvals: ApprovalStore | None = None
    desk: ApprovalDesk | None = None
    tracer: Tracer = NO_TRACER
    # Tasks waiting for the models, marked so they are tried at once when a model answers
    # again or their thread gets a new message; without, they only wait in the queue.
    waits: ModelWaits | None = None


class QueueWaits:
    """`ModelWaits` for a queue that marks nothing: a deferral is a plain retry, every
    try is counted, and every task tells its thread for itself."""

    def __init__(self, queue: TaskQueue) -> None:
        self._queue = queue

    async def standing(self, task: Task) -> ModelWait:
        return ModelWait()

    async def defer(self, task: Task, delay: float, reason: str) -> None:
        await self._queue.retry_later(task, delay, reason)

    async def told(self, task: Task) -> None:
        pass
