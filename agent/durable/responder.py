"""The one object the task runner needs: run a round, run a subtask.

`ModelResponder(round_input)` renders the round (system prompt, numbered window, earlier
delegations), offers its controls and work tools, and lets the attempt ladder run the
round on each model slot in turn (retrying what is transient, falling back on what is
not, stopping on a refused credential). What comes out is a `Decision`: a `Reply` to
post, or a `Delegation` whose subtasks the runner runs through `run_subtask`.

`run_subtask` reports every way a subtask can fail as `SubtaskFailed` — its message is
what the next round reads — except the model-layer stops (`CredentialRejected`,
`QuotaExhausted`, `ModelsUnavailable`), which propagate unchanged so the runner alerts
the operator or retries later exactly as it does for a round.

With a `LiveView`, each round's reply is shown while the model writes it (a draft of the
task's reply, `agent.rounds.live_reply`).

With a `UsageMeter`, every model response of a round or a subtask is charged to its task
(`_MeteredModel` wraps the model in each attempt): the tokens go to the user's and the
channel's usage of the day, and the task's count of model requests comes back. One
message could otherwise cost hundreds of requests (rounds × repairs × tool steps ×
subtasks × retries); at `max_model_requests` the next request is not made and the round
ends with `ModelBudgetExceeded`. The count is durable, so rounds on other replicas and
parallel subtasks share it; those may overshoot the cap by the one request each makes
before learning the count.

With an `ApprovalStore`, tools that need a person's approval are offered in a task's own
rounds; a round that called one ends `Paused`, and the round that resumes it first settles
the paused step (agent/rounds/resume.py: approved calls run at most once, the others are
told they were declined), then asks the model again (agent/core/approval.py).

With a `Memory`, a round is asked under its session's pinned system prompt (the epoch of
the session's first task, `agent.rounds.prompt`), and every decision carries its
`AnswerOrigin`: that epoch and the route of the slot that answered (the ladder returns it
with the answer), for the runner to store with the reply or acknowledgment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from pydantic import ValidationError

from agent.core.approval import ApprovalStore
from agent.core.delegation import RoundInput, Subtask
from agent.core.errors import (
    CredentialRejected,
    ModelBudgetExceeded,
    ModelsUnavailable,
    QuotaExhausted,
    RoundFailed,
    SubtaskFailed,
)
from agent.core.ports import (
    AnswerOrigin,
    LiveView,
    Memory,
    PromptEpoch,
    Showing,
    Task,
    ThreadReader,
    ToolObserver,
    UsageMeter,
)
from agent.models.contract import (
    Finish,
    Model,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    Usage,
    Watch,
)
from agent.models.ladder import Answered, Attempts
from agent.rounds.citations import Citable
from agent.rounds.control import Decision, round_controls
from agent.rounds.loop import run_round
from agent.rounds.pause import RoundSoFar
from agent.rounds.prompt import prompt_epoch, system_prompt, transcript
from agent.rounds.references import ReferenceCatalog
from agent.rounds.resume import settle_step
from agent.rounds.settings import DEFAULT_ROUND, RoundSettings
from agent.rounds.subtask_types import SubtaskContext, SubtaskRegistry, SubtaskType
from agent.rounds.tools import (
    Clock,
    Toolbox,
    ToolContext,
    ToolRegistry,
    utc_now,
    validation_problems,
)

__all__ = ["Attempts", "ModelResponder"]

_STOPS = (CredentialRejected, QuotaExhausted, ModelsUnavailable, ModelBudgetExceeded)

T = TypeVar("T")


class ModelResponder:
    """Runs rounds and subtasks for the task runner, on one attempt ladder."""

    def __init__(
        self,
        attempts: Attempts,
        *,
        tools: ToolRegistry | None = None,
        subtasks: SubtaskRegistry | None = None,
        thread_reader: ThreadReader | None = None,
        settings: RoundSettings = DEFAULT_ROUND,
        clock: Clock = utc_now,
        meter: UsageMeter | None = None,
        max_model_requests: int = 0,
        live: LiveView | None = None,
        tool_observer: ToolObserver | None = None,
        memory: Memory | None = None,
        instructions: str = "",
        approvals: ApprovalStore | None = None,
    ) -> None:
        self._approvals = approvals
        self._memory = memory
        self._live = live
        self._observer = tool_observer
        self._meter = meter
        self._max_requests = max_model_requests
        self._attempts = attempts
        self._tools = tools if tools is not None else ToolRegistry()
        self._subtasks = subtasks if subtasks is not None else SubtaskRegistry()
        self._reader = thread_reader
        self._settings = settings
        self._clock = clock
        self.epoch = prompt_epoch(system_prompt(self._subtasks, instructions))

    async def __call__(self, round_input: RoundInput) -> Decision:
        """Run one round of the task and return how it ended."""
        catalog = ReferenceCatalog.from_window(round_input.window)
        epoch = round_input.prompt or await self.pin_prompt(round_input.task)
        messages = transcript(round_input, catalog, self._subtasks, system=epoch.text)
        citable = Citable(catalog)
        controls = round_controls(
            final=round_input.final,
            subtasks=self._subtasks,
            catalog=catalog,
            max_subtasks=self._settings.max_subtasks,
            citable=citable,
            silent=round_input.task.schedule_id is not None,  # a schedule's run may say nothing
        )
        # A schedule's run has nobody watching it to approve a call: such tools are withheld.
        approvals = self._approvals is not None and round_input.task.schedule_id is None
        context = self._tool_context(round_input.task, approvals=approvals)
        toolbox = Toolbox(self._tools, context, self._settings)
        so_far = await self._settled(round_input, toolbox)
        task = round_input.task
        draft = self._live.draft(task, task.reply_id) if self._live is not None else None

        async def attempt(model: Model) -> Decision:
            return await run_round(
                model,
                messages,
                controls,
                self._settings,
                toolbox=toolbox,
                draft=draft,
                citable=citable,
                so_far=so_far,
            )

        answered = await self._metered(round_input.task).run(attempt)
        return replace(answered.value, origin=AnswerOrigin(epoch.hash, answered.route))

    async def ask_text(
        self, task: Task, messages: Sequence[ModelMessage], *, max_output_tokens: int
    ) -> str:
        """One plain-text answer (no tools) through the ladder, charged to the task like
        its rounds; an empty or cut answer is a failed attempt (the next slot is tried)."""
        request = ModelRequest(tuple(messages), max_output_tokens=max_output_tokens)

        async def attempt(model: Model) -> str:
            response = await model.request(request)
            if response.finish_reason == "length" or not response.text.strip():
                raise RoundFailed(f"the model gave no usable text ({response.finish_reason})")
            return response.text

        return (await self._metered(task).run(attempt)).value

    async def pin_prompt(self, task: Task) -> PromptEpoch:
        """The prompt the task's session is pinned to (pinning it to this deployment's
        prompt on its first task); this deployment's prompt without a memory."""
        if self._memory is None:
            return self.epoch
        return await self._memory.pin_prompt(task.session_id, self.epoch)

    async def run_subtask(self, subtask: Subtask, task: Task) -> str:
        """The subtask's result text, or `SubtaskFailed` saying (for the model) why not."""
        kind = self._kind(subtask.request.type)
        params = _params(kind, subtask)
        try:
            return await kind.run(
                self._subtask_context(task, kind.name), params, subtask.request.references
            )
        except _STOPS:
            raise
        except SubtaskFailed:
            raise
        except Exception as exc:
            raise SubtaskFailed(
                f"Subtask {kind.name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _kind(self, name: str) -> SubtaskType[Any]:
        kind = self._subtasks.get(name)
        if kind is None:
            known = ", ".join(self._subtasks.names) or "none"
            raise SubtaskFailed(
                f"There is no subtask type {name!r} (available: {known}); it did not run."
            )
        return kind

    async def _settled(self, round_input: RoundInput, toolbox: Toolbox) -> RoundSoFar | None:
        """A resumed round's paused step settled, once per run (not per model attempt:
        the ladder may try the model again, the step's tools are not run again)."""
        if round_input.resume is None:
            return None
        assert self._approvals is not None  # only a runner with a store pauses
        return await settle_step(round_input.resume, toolbox, self._approvals)

    def _tool_context(
        self, task: Task, subtask_type: str | None = None, *, approvals: bool = False
    ) -> ToolContext:
        return ToolContext(
            task, self._reader, self._clock, self._observer, subtask_type, approvals=approvals
        )

    def _subtask_context(self, task: Task, kind: str) -> SubtaskContext:
        context = self._tool_context(task, kind)
        return SubtaskContext(task, self._metered(task), self._tools, context, self._settings)

    def _metered(self, task: Task) -> Attempts:
        if self._meter is None:
            return self._attempts
        return _MeteredAttempts(self._attempts, _Allowance(self._meter, task, self._max_requests))


class _Allowance:
    """One task's model requests, as the meter counts them; 0 as the cap counts only."""

    def __init__(self, meter: UsageMeter, task: Task, cap: int) -> None:
        self._meter = meter
        self._task = task
        self._cap = cap
        self._made = 0  # the task's count as last recorded here

    def check(self) -> None:
        if self._cap and self._made >= self._cap:
            raise ModelBudgetExceeded(
                f"the task made {self._made} model requests, its limit is {self._cap}"
            )

    async def charge(self, usage: Usage) -> None:
        self._made = await self._meter.record(self._task, usage.input_tokens, usage.output_tokens)
        if self._cap and self._made > self._cap:
            self.check()


class _MeteredAttempts:
    """The ladder, with every model it hands an attempt charged to one task's allowance."""

    def __init__(self, inner: Attempts, allowance: _Allowance) -> None:
        self._inner = inner
        self._allowance = allowance

    async def run(self, attempt: Callable[[Model], Awaitable[T]]) -> Answered[T]:
        async def metered(model: Model) -> T:
            return await attempt(_MeteredModel(model, self._allowance))

        return await self._inner.run(metered)


class _MeteredModel(Model):
    """A model whose every answer is charged, and which refuses to ask past the cap."""

    def __init__(self, inner: Model, allowance: _Allowance) -> None:
        self.name = inner.name
        self._inner = inner
        self._allowance = allowance

    async def request(
        self,
        request: ModelRequest,
        *,
        watch: Watch | None = None,
        showing: Showing | None = None,
    ) -> ModelResponse:
        self._allowance.check()
        response = await self._inner.request(request, watch=watch, showing=showing)
        await self._allowance.charge(response.usage)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self._allowance.check()
        usage: Usage | None = None
        async for event in self._inner.stream(request):
            if isinstance(event, Finish):
                usage = event.usage
            yield event
        await self._allowance.charge(usage or Usage())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __getattr__(self, name: str) -> object:
        # `route` and the like belong to the wrapped model (the ladder reads them).
        return getattr(self._inner, name)


def _params(kind: SubtaskType[Any], subtask: Subtask) -> Any:
    """The stored params as the type's model; they were valid when delegated, but the
    type may have changed since (a plugin upgrade between rounds)."""
    try:
        return kind.params.model_validate(subtask.request.params)
    except ValidationError as exc:
        raise SubtaskFailed(
            f"Subtask {kind.name!r} did not run: its params are invalid "
            f"({validation_problems(exc)})."
        ) from exc
