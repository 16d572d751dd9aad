"""Approval before a tool acts: a tool call that waits, durably, for a person. Start here.

1. The MCP config marks tools (`requireApproval`, agent/rounds/mcp_config.py): such a
   tool's `WorkTool.requires_approval` is set, and it is offered only where a person can
   be asked — a task's own rounds on a runner with an `ApprovalStore`, never a sub-agent
   (agent/rounds/tools.py).
2. When a step of a round calls one, the round stops before any call of that step runs
   (agent/rounds/loop.py): its decision is `Paused`, with the round so far (the model's
   messages after the transcript, written by agent/rounds/pause.py) and one
   `ApprovalRequest` per call that needs a person.
3. The runner (agent/durable/runner.py) stores it (`ApprovalStore.pause`, idempotent),
   asks through the `ApprovalDesk` (on Slack: a message with approve and deny buttons,
   posted once through the outbox under the request's id) and releases the task
   (`await_decisions`): no worker waits, and a restart finds it waiting in Postgres.
4. A decision (a click, gateway/inbound/interactions.py → storage/approvals.py) or the
   timeout (found by any replica's claim, storage/queue.py) makes the task runnable. Its
   next run loads the pause with its `ApprovalDecision`s and continues the same round
   (agent/durable/responder.py, agent/rounds/pause.py): approved calls run; denied and
   timed-out ones are failed results that say the person declined.

**Exactly once.** An approved call is started at most once, ever: `start_call` records the
start before the tool runs, and any later run of the round (a retried model request, a
re-run after a crash, another replica) that finds it started does not start it again.
Finished, its stored result is what every later run reads. Started but never finished —
the process died during the call — it is not run again either: the model is told that the
outcome is unknown. A tool cut off mid-call may or may not have acted, and running it a
second time could act twice, which is what asking a person was meant to prevent. So
"exactly once" is: once when nothing crashes, at most once when something does.

Everything here is plain data, so it can be stored and compared in tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, TypeAlias

from agent.core.ports import AnswerOrigin, Task

# A decision's kind: a person approved or denied the call, or nobody decided in time
# (THREADGATE_APPROVAL_TIMEOUT_SECONDS), which counts as a denial.
Verdict: TypeAlias = Literal["approved", "denied", "timed_out"]
# What `start_call` found: this run is to run the call, it ran (its result is stored), or
# it was started and never finished (the process died during the call).
CallRunState: TypeAlias = Literal["start", "done", "interrupted"]

# How long a call waits for a person unless the gateway says otherwise.
DEFAULT_APPROVAL_TIMEOUT_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One tool call waiting for a person. `id` names it everywhere: in storage, in the
    message that asks (its outbox id), in the buttons of that message."""

    id: str
    call_id: str
    tool: str  # the name offered to the model, e.g. "github__create_issue"
    arguments: str  # the raw JSON the model wrote


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """How a request was decided: by whom (a person's id; None for a timeout) and when."""

    verdict: Verdict
    by: str | None = None
    at: datetime | None = None

    @property
    def approved(self) -> bool:
        return self.verdict == "approved"


@dataclass(frozen=True, slots=True)
class GatedCall:
    """A tool call that needs a person before it runs, as the model made it."""

    call_id: str
    tool: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Paused:
    """A round's outcome when a step calls tools that need a person: nothing of the step
    ran. `state` is the round so far (agent/rounds/pause.py writes and reads it); the
    requests are the step's calls that need approval, in call order."""

    state: str
    calls: tuple[GatedCall, ...]
    # Which prompt and route produced the step (set by the responder).
    origin: AnswerOrigin | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class PausedRound:
    """A stored pause: the task's `number`-th, in round `round`, with its requests and the
    decisions made so far (by request id)."""

    number: int
    round: int
    state: str
    requests: tuple[ApprovalRequest, ...]
    decisions: Mapping[str, ApprovalDecision] = field(default_factory=dict)
    # Seconds the task has waited for people in all its pauses (its time limit leaves
    # them out: a person deciding tomorrow must not have used up the task's time).
    waited_seconds: float = field(default=0.0, compare=False)

    @property
    def undecided(self) -> tuple[ApprovalRequest, ...]:
        return tuple(r for r in self.requests if r.id not in self.decisions)


@dataclass(frozen=True, slots=True)
class CallRun:
    """What `ApprovalStore.start_call` found, and for a call that ran, its result."""

    state: CallRunState
    output: str = ""
    is_error: bool = False


class ApprovalStore(Protocol):
    """Durable approvals: paused rounds, their requests and decisions, and the one run of
    each approved call."""

    async def pause(
        self, task: Task, paused: PausedRound, *, timeout_seconds: float
    ) -> PausedRound:
        """Store the pause and its requests (each due `timeout_seconds` from now) unless
        stored already; return what is stored."""

    async def paused(self, task: Task) -> PausedRound | None:
        """The task's latest pause with its decisions; requests past their deadline are
        decided as timed out first. None when the task never paused."""

    async def await_decisions(self, task: Task) -> None:
        """Release the task until no request of its pause is undecided (at once if none is)."""

    async def start_call(self, task: Task, request_id: str) -> CallRun:
        """Record that the approved call starts, unless it started before: then say how
        that run ended (`done`, with its result) or that it never did (`interrupted`)."""

    async def finish_call(
        self, task: Task, request_id: str, output: str, *, is_error: bool
    ) -> None:
        """Store the result of the call `start_call` let run."""


class ApprovalDesk(Protocol):
    """Where people are asked (for Slack: a message with approve and deny buttons)."""

    async def ask(self, task: Task, request: ApprovalRequest) -> None:
        """Ask for a decision on `request`, once however often it is called."""

    async def show(self, task: Task, request: ApprovalRequest, decision: ApprovalDecision) -> None:
        """Show the decision where it was asked. Display only: never raises."""
