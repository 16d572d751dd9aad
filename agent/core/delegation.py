"""Delegation: how a `delegate` call becomes subtasks and comes back. Start reading here.

1. The model calls `delegate` in a round. `agent.rounds.control.Delegate.parse` validates
   the call (subtask types, params, `[ref N]` citations) and returns a `Delegation`: the
   acknowledgment to post and one `SubtaskRequest` per subtask.
2. The runner (`agent.durable.runner.TaskRunner._advance`) stores it through the
   `DelegationStore` port — on Postgres, `storage.delegations`, in one transaction: the
   round, the acknowledgment as a history message, one leased row per subtask — then
   publishes the acknowledgment and releases the task until its subtasks end.
3. Any worker claims a subtask row (`claim_subtask`) and runs it
   (`TaskRunner.run_subtask` → `ModelResponder.run_subtask` → the `SubtaskType`, e.g. the
   built-in sub-agent in `agent.rounds.subagent`), within its time limit, and settles it
   done, failed or timed out. The last subtask to settle makes the task runnable again.
4. The task's next round `load`s a `RoundState`: every finished delegating round as a
   `RoundRecord` with its `SubtaskOutcome`s, which `agent.rounds.prompt` shows the model
   as its own delegate call followed by the results. The last round cannot delegate.

Everything here is plain data so it can be stored, replayed after a crash, and compared
in tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from agent.core.ports import (
    NO_LISTED_PINS,
    AnswerOrigin,
    ListedPins,
    PromptEpoch,
    StoredMessage,
    Task,
    TaskQueue,
)

if TYPE_CHECKING:
    from agent.core.approval import PausedRound

_TITLE_CHARS = 80
# A subtask's time limit unless the gateway says otherwise (THREADGATE_SUBTASK_TIMEOUT_SECONDS).
DEFAULT_SUBTASK_TIMEOUT_SECONDS = 300.0

SubtaskState: TypeAlias = Literal["done", "failed", "timed_out"]


@dataclass(frozen=True, slots=True)
class SubtaskRequest:
    """One subtask as the model asked for it; cited `[ref N]`s already resolved to text."""

    type: str
    params: Mapping[str, Any]
    references: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        """How people watching the task see this subtask: its type, and the first text
        among its params (what it is about, as far as a line can say)."""
        about = next((v for v in self.params.values() if isinstance(v, str) and v.strip()), "")
        about = " ".join(about.split())
        if len(about) > _TITLE_CHARS:
            about = about[: _TITLE_CHARS - 1] + "…"
        return f"{self.type}: {about}" if about else self.type


@dataclass(frozen=True, slots=True)
class Delegation:
    """A round's outcome: post `acknowledgment`, run `subtasks`, then run the next round.

    The delegate call itself (`call_id`, `raw_arguments`) is kept so the next round can be
    shown exactly what it asked for.
    """

    acknowledgment: str
    subtasks: tuple[SubtaskRequest, ...]
    call_id: str
    raw_arguments: str
    # Which prompt and route produced it (set by the responder; not part of the decision).
    origin: AnswerOrigin | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Subtask:
    """A leased subtask row: the `index`-th subtask of round `round` of task `task_id`."""

    task_id: str
    round: int
    index: int
    request: SubtaskRequest
    attempts: int = 1
    timeout_seconds: float = DEFAULT_SUBTASK_TIMEOUT_SECONDS

    @property
    def id(self) -> str:
        return subtask_id(self.task_id, self.round, self.index)


def subtask_id(task_id: str, round_number: int, index: int) -> str:
    """The id of the `index`-th subtask of round `round_number` of a task."""
    return f"{task_id}:{round_number}:{index}"


@dataclass(frozen=True, slots=True)
class SubtaskOutcome:
    """How a subtask ended: its result text, or what went wrong (written for the model)."""

    index: int
    type: str
    state: SubtaskState
    text: str


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """A finished delegating round, as the following rounds must see it."""

    number: int
    call_id: str
    raw_arguments: str
    outcomes: tuple[SubtaskOutcome, ...]
    acknowledgment: str = ""


@dataclass(frozen=True, slots=True)
class RoundInput:
    """Everything one round needs to know.

    `window` is the conversation (this task's own acknowledgments excluded: they appear as
    the delegate calls in `rounds`); `number` == len(rounds); `final` rounds may not
    delegate. `prompt`: the system prompt the task's session is pinned to, when the
    runner read it beside the window (None: the responder reads it). `resume`: the pause
    this round continues from, every request decided (agent/core/approval.py).
    """

    task: Task
    window: Sequence[StoredMessage]
    rounds: Sequence[RoundRecord] = field(default_factory=tuple)
    number: int = 0
    final: bool = False
    prompt: PromptEpoch | None = None
    resume: PausedRound | None = None
    pins: ListedPins = NO_LISTED_PINS  # the window's pins listed rather than shown


@dataclass(frozen=True, slots=True)
class RoundState:
    """What a task has done so far: finished delegating rounds, and one still waiting."""

    finished: tuple[RoundRecord, ...] = ()
    pending: Delegation | None = None

    @property
    def next_round(self) -> int:
        return len(self.finished) + (self.pending is not None)


class DelegationStore(Protocol):
    """Durable delegation: rounds, their subtasks as leased rows, and the way back."""

    async def load(self, task: Task) -> RoundState: ...

    async def record(
        self, task: Task, number: int, delegation: Delegation, *, timeout_seconds: float
    ) -> Delegation:
        """Store round `number`'s delegation with its acknowledgment (as a history message)
        and its subtasks, unless stored already; return what is stored."""

    async def await_subtasks(self, task: Task) -> None:
        """Release the task until its subtasks have all ended (at once if they have)."""

    async def claim_subtask(self) -> tuple[Subtask, Task] | None:
        """Lease the oldest runnable subtask (and time out overdue ones)."""

    async def claim_next(self, tasks: TaskQueue) -> tuple[Subtask, Task] | Task | None:
        """Lease the oldest runnable subtask (as `claim_subtask`), else the next runnable
        task of `tasks` (as its `claim`): a worker's look for work, in one round trip
        where the store can."""

    async def heartbeat_subtask(self, subtask: Subtask) -> bool: ...

    async def settle_subtask(self, subtask: Subtask, state: SubtaskState, text: str) -> None:
        """Record how a subtask ended; the last one to end makes its task runnable."""

    async def retry_subtask_later(self, subtask: Subtask, delay: float) -> None: ...
