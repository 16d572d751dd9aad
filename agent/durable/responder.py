"""The one object the task runner needs: run a round, run a subtask.

`ModelResponder(round_input)` renders the round (system prompt, numbered window, earlier
delegations), offers its controls and work tools, and lets the attempt ladder run the
round on each model slot in turn (retrying what is transient, falling back on what is
not, stopping on a refused credential). What comes out is a `Decision`: a `Reply` to
post, or a `Delegation` whose subtasks the runner runs through `run_subtask`.

Its constructor says what it needs in two values: `ResponderPorts` (the stores and
observers it reads, writes and tells, each optional) and `ResponderSettings` (how it
asks); the paragraphs below say what each turns on.

`run_subtask` reports every way a subtask can fail as `SubtaskFailed` — its message is
what the next round reads — except the model-layer stops (`CredentialRejected`,
`QuotaExhausted`, `ModelsUnavailable`), which propagate unchanged so the runner alerts
the operator or retries later exactly as it does for a round.

With a `LiveView`, each round's reply is shown while the model writes it (a draft of the
task's reply, `agent.rounds.live_reply`).

With a `UsageMeter`, every model response of a round or a subtask is charged to its task
(`_MeteredModel` wraps the model in each attempt): the tokens, and their cost by the
price table (agent/models/prices.py), go to the user's, the channel's and the workspace's
usage of the day, and the task's count of model requests comes back. One
message could otherwise cost hundreds of requests (rounds × repairs × tool steps ×
subtasks × retries); at `max_model_requests` the next request is not made and the round
ends with `ModelBudgetExceeded`. The count is durable, so rounds on other replicas and
parallel subtasks share it; those may overshoot the cap by the one request each makes
before learning the count.

With an `ApprovalStore`, tools that need a person's approval are offered in a task's own
rounds; a round that called one ends `Paused`, and the round that resumes it first settles
the paused step (agent/rounds/resume.py: approved calls run at most once, the others are
told they were declined), then asks the model again (agent/core/approval.py).

With `prompt_caching` (the default), every request names its conversation and its stable
prefix for the provider's prompt cache (agent/rounds/caching.py): the session's for a
round, the session's and type's for a sub-agent.

With a `Memory`, a round is asked under its session's epoch (`agent.rounds.prompt`): the
system prompt the session was pinned to, with exactly the offer it was pinned with — the
controls, the subtask types, the work tools, as `round_offer` spells them, compared by
hash at every round and every subtask. When the offer changed (a deploy, a channel's
policy, an MCP server gone), the session begins a new epoch, `offer_changed`, recorded
(`threadgate tasks show` lists a session's epochs), with this deployment's prompt: the
old offer cannot be kept — a tool no longer registered cannot run, one whose schema
changed would be called the old way, and one a channel's policy now withholds must not be
offered at all — and the old prompt is never shown beside an offer it was not written
with (the silent hybrid). A change of the prompt's words alone keeps the old epoch. A
sub-agent's prompt is the one its session's epoch pinned, and its subtask records the
epoch it ran under. Every decision carries its `AnswerOrigin`: the epoch and the route of
the slot that answered (the ladder returns it with the answer), for the runner to store
with the reply or acknowledgment.

Every model an attempt is handed is the task's (`agent.models.task_model.TaskModel`): with
`end_user`, each request names the task's person by the gateway's opaque id; with
`refusals`, a picture or document a provider refused is withheld from the task's later
requests — its rounds and subtasks share what is withheld — and recorded, so no later round
of any replica sends it again.

With a `Steering`, a round in a channel whose queue mode is `steer` takes the thread's new
messages after each work step, before it asks the model again (agent/rounds/steering.py).

With a `PolicyOf`, each round, subtask and summary is run within its task's channel policy
(`agent.rounds.channel_policy`): the toolset the round and its subtasks are offered, the
channel's instructions in the prompt a new session is pinned to (its own epoch), the
channel's attempt ladder and its cap on model requests.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from pydantic import ValidationError

from agent.core.approval import ApprovalStore
from agent.core.attachments import AttachmentRefusals
from agent.core.delegation import RoundInput, Subtask
from agent.core.errors import (
    CredentialRejected,
    ModelBudgetExceeded,
    ModelsUnavailable,
    QuotaExhausted,
    RoundFailed,
    Route,
    SubtaskFailed,
)
from agent.core.ports import (
    AnswerOrigin,
    LiveView,
    Memory,
    ModelCharge,
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
    ToolSpec,
    Usage,
    Watch,
)
from agent.models.ladder import Answered, Attempts
from agent.models.prices import DEFAULT_PRICE_TABLE, PriceTable
from agent.models.task_model import TaskModel, Withheld, WithheldByTask
from agent.rounds.caching import cache_key, conversation_cache
from agent.rounds.channel_policy import (
    DEFAULT_POLICY,
    ChannelPolicy,
    PolicyOf,
    combined_instructions,
)
from agent.rounds.citations import Citable
from agent.rounds.control import ControlTool, Decision, round_controls
from agent.rounds.loop import offered, run_round
from agent.rounds.pause import RoundSoFar
from agent.rounds.prompt import prompt_epoch, system_prompt, transcript
from agent.rounds.references import ReferenceCatalog
from agent.rounds.resume import settle_step
from agent.rounds.settings import DEFAULT_ROUND, RoundSettings
from agent.rounds.steering import Steer, Steering
from agent.rounds.subtask_types import SubtaskContext, SubtaskRegistry, SubtaskType
from agent.rounds.tools import (
    Clock,
    Toolbox,
    ToolContext,
    ToolRegistry,
    utc_now,
    validation_problems,
)

__all__ = [
    "DEFAULT_RESPONDER",
    "Attempts",
    "ModelResponder",
    "ResponderPorts",
    "ResponderSettings",
]

_STOPS = (CredentialRejected, QuotaExhausted, ModelsUnavailable, ModelBudgetExceeded)

# An epoch worked out for a system prompt and an offer (`ModelResponder._epoch`): the
# prompt, then each spec's name, description and the id of its (shared) schema.
_EpochKey = tuple[str, tuple[tuple[str, str, int], ...]]
# How many such epochs are kept: one per channel instructions and offer in force.
_EPOCHS_KEPT = 64

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ResponderPorts:
    """What a responder reads, writes and tells; each is optional, and without one the
    feature it serves is off (the module docstring says what each turns on)."""

    thread_reader: ThreadReader | None = None
    tool_observer: ToolObserver | None = None
    live: LiveView | None = None
    meter: UsageMeter | None = None
    memory: Memory | None = None
    approvals: ApprovalStore | None = None
    refusals: AttachmentRefusals | None = None
    steering: Steering | None = None


@dataclass(frozen=True, slots=True)
class ResponderSettings:
    """How a responder asks: the bounds of a round, the cap on a task's model requests
    (0: uncapped), the deployment's instructions, the prices it charges, whether requests
    name their prompt cache, and the opaque id naming a task's person to providers."""

    round: RoundSettings = DEFAULT_ROUND
    max_model_requests: int = 0
    instructions: str = ""
    prices: PriceTable = DEFAULT_PRICE_TABLE
    prompt_caching: bool = True
    end_user: Callable[[Task], str | None] | None = None


DEFAULT_RESPONDER = ResponderSettings()
_NO_PORTS = ResponderPorts()


class ModelResponder:
    """Runs rounds and subtasks for the task runner, on one attempt ladder."""

    def __init__(
        self,
        attempts: Attempts,
        *,
        tools: ToolRegistry | None = None,
        subtasks: SubtaskRegistry | None = None,
        policies: PolicyOf | None = None,
        ports: ResponderPorts = _NO_PORTS,
        settings: ResponderSettings = DEFAULT_RESPONDER,
        clock: Clock = utc_now,
    ) -> None:
        self._attempts = attempts
        self._tools = tools if tools is not None else ToolRegistry()
        self._subtasks = subtasks if subtasks is not None else SubtaskRegistry()
        self._policies = policies
        self._ports = ports
        self._settings = settings
        self._round = settings.round
        self._clock = clock
        self._prompts: dict[str, str] = {}  # system prompts, by a channel's instructions
        # What any round but a task's last offers beside its work tools (its catalog is
        # the round's own, but the specs do not depend on it), and the sub-agents' prompts.
        # A schedule's run is offered `no_reply` too (keyed by whether a round may be silent).
        self._offered_controls: dict[bool, tuple[ControlTool, ...]] = {
            silent: round_controls(
                final=False,
                subtasks=self._subtasks,
                catalog=ReferenceCatalog.from_window(()),
                max_subtasks=settings.round.max_subtasks,
                silent=silent,
            )
            for silent in (False, True)
        }
        self._subagents = {k.name: k.prompt for k in self._subtasks if k.prompt is not None}
        # Epochs already worked out, by the system prompt and each offered spec's name,
        # description and schema object (schemas are built once and shared, and an entry
        # holds its specs, so no schema's id is reused while the entry lives): the offer's
        # JSON and its hashes were made again every round, for the same answer.
        self._epochs: dict[_EpochKey, tuple[tuple[ToolSpec, ...], PromptEpoch]] = {}
        # What each task's requests no longer carry, shared by its rounds and subtasks.
        self._withheld = WithheldByTask()

    async def __call__(self, round_input: RoundInput) -> Decision:
        """Run one round of the task and return how it ended."""
        catalog = ReferenceCatalog.from_window(round_input.window)
        policy = self._policy(round_input.task)
        toolbox = self._toolbox(round_input.task, policy)
        epoch = await self._pin(round_input.task, policy, toolbox, round_input.prompt)
        messages = transcript(round_input, catalog, self._subtasks, system=epoch.text)
        citable = Citable(catalog)
        controls = round_controls(
            final=round_input.final,
            subtasks=self._subtasks,
            catalog=catalog,
            max_subtasks=self._round.max_subtasks,
            citable=citable,
            silent=round_input.task.schedule_id is not None,  # a schedule's run may say nothing
        )
        so_far = await self._settled(round_input, toolbox)
        task = round_input.task
        live = self._ports.live
        draft = live.draft(task, task.reply_id) if live is not None else None
        cache = conversation_cache(self._cache_key(task.session_id), len(messages))
        steer = self._steer(task, policy)

        async def attempt(model: Model) -> Decision:
            return await run_round(
                model,
                messages,
                controls,
                self._round,
                toolbox=toolbox,
                draft=draft,
                citable=citable,
                so_far=so_far,
                cache=cache,
                steer=steer,
            )

        answered = await self._metered(round_input.task, policy).run(attempt)
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

        return (await self._metered(task, self._policy(task)).run(attempt)).value

    async def pin_prompt(self, task: Task) -> PromptEpoch:
        """The epoch the task's session is asked under (the module docstring): its pinned
        one while that offers what this deployment offers the task, else this deployment's
        (with the channel's instructions), begun as the session's next epoch; this
        deployment's without a memory."""
        policy = self._policy(task)
        return await self._pin(task, policy, self._toolbox(task, policy))

    def epoch_of(self, task: Task) -> PromptEpoch:
        """The epoch a session of the task's channel begins on this deployment."""
        policy = self._policy(task)
        return self._epoch(policy, self._toolbox(task, policy))

    async def _pin(
        self,
        task: Task,
        policy: ChannelPolicy,
        toolbox: Toolbox,
        known: PromptEpoch | None = None,
    ) -> PromptEpoch:
        """The session's epoch for a round offered `toolbox`: `known` (read beside the
        window) if it offers the same, else the memory's answer."""
        current = self._epoch(policy, toolbox)
        if known is not None and known.offers_as(current):
            return known
        if self._ports.memory is None:
            return current
        return await self._ports.memory.pin_prompt(task.session_id, current)

    def _epoch(self, policy: ChannelPolicy, toolbox: Toolbox) -> PromptEpoch:
        """This deployment's epoch for a round offered `toolbox` in `policy`'s channel."""
        silent = toolbox.context.task.schedule_id is not None
        offer = offered(self._offered_controls[silent], toolbox)
        system = self._system(policy)
        key = (system, tuple((s.name, s.description, id(s.parameters)) for s in offer))
        if (known := self._epochs.get(key)) is None:
            if len(self._epochs) >= _EPOCHS_KEPT:  # offers changed many times: start over
                self._epochs.clear()
            known = offer, prompt_epoch(system, offer=offer, subagents=self._subagents)
            self._epochs[key] = known
        return known[1]

    def _system(self, policy: ChannelPolicy) -> str:
        """The system prompt with `policy`'s instructions, made once per text."""
        if (known := self._prompts.get(policy.instructions)) is None:
            instructions = combined_instructions(self._settings.instructions, policy.instructions)
            known = system_prompt(self._subtasks, instructions)
            self._prompts[policy.instructions] = known
        return known

    def _toolbox(self, task: Task, policy: ChannelPolicy) -> Toolbox:
        """The work tools the task's own rounds are offered (its channel's). A schedule's
        run has nobody watching it to approve a call: such tools are withheld from it."""
        approvals = self._ports.approvals is not None and task.schedule_id is None
        context = self._tool_context(task, approvals=approvals)
        return Toolbox(policy.toolset(self._tools), context, self._round)

    def _steer(self, task: Task, policy: ChannelPolicy) -> Steer | None:
        """The round's steering, in a channel that steers (never a schedule's run)."""
        steering = self._ports.steering
        if steering is None or policy.thread_queue != "steer" or task.schedule_id is not None:
            return None
        return Steer(functools.partial(steering.take, task))

    def _policy(self, task: Task) -> ChannelPolicy:
        return self._policies(task) if self._policies is not None else DEFAULT_POLICY

    async def run_subtask(self, subtask: Subtask, task: Task) -> str:
        """The subtask's result text, or `SubtaskFailed` saying (for the model) why not;
        run under its session's epoch (its sub-agent's prompt), which it records."""
        kind = self._kind(subtask.request.type)
        params = _params(kind, subtask)
        policy = self._policy(task)
        epoch = await self._pin(task, policy, self._toolbox(task, policy))
        if self._ports.memory is not None:
            s = subtask
            await self._ports.memory.stamp_subtask(
                s.task_id, s.round, s.index, s.attempts, epoch.hash
            )
        context = self._subtask_context(task, kind.name, policy, epoch.subagent_prompt(kind.name))
        try:
            return await kind.run(context, params, subtask.request.references)
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
        approvals = self._ports.approvals
        assert approvals is not None  # only a runner with a store pauses
        return await settle_step(round_input.resume, toolbox, approvals)

    def _tool_context(
        self, task: Task, subtask_type: str | None = None, *, approvals: bool = False
    ) -> ToolContext:
        return ToolContext(
            task,
            self._ports.thread_reader,
            self._clock,
            self._ports.tool_observer,
            subtask_type,
            approvals=approvals,
        )

    def _subtask_context(
        self, task: Task, kind: str, policy: ChannelPolicy, prompt: str | None
    ) -> SubtaskContext:
        context = self._tool_context(task, kind)
        key = self._cache_key(f"{task.session_id}:{kind}")
        tools = policy.toolset(self._tools)  # a subtask inherits its channel's boundary
        attempts = self._metered(task, policy)
        return SubtaskContext(
            task, attempts, tools, context, self._round, cache_key=key, prompt=prompt
        )

    def _cache_key(self, conversation: str) -> str | None:
        return cache_key(conversation) if self._settings.prompt_caching else None

    def _metered(self, task: Task, policy: ChannelPolicy = DEFAULT_POLICY) -> Attempts:
        """The channel's ladder, each model it hands an attempt charged to the task's
        allowance (with a meter) and made the task's (`TaskModel`)."""
        attempts = policy.attempts or self._attempts
        s, meter = self._settings, self._ports.meter
        allowance = None
        if meter is not None:
            cap = (
                s.max_model_requests
                if policy.max_model_requests is None
                else policy.max_model_requests
            )
            allowance = _Allowance(meter, task, cap, s.prices)
        end_user = s.end_user(task) if s.end_user is not None else None
        withheld = self._withheld.of(task.id)
        return _MeteredAttempts(attempts, allowance, end_user, self._ports.refusals, withheld)


class _Allowance:
    """One task's model requests, as the meter counts them; 0 as the cap counts only."""

    def __init__(self, meter: UsageMeter, task: Task, cap: int, prices: PriceTable) -> None:
        self._meter = meter
        self._task = task
        self._cap = cap
        self._prices = prices
        self._made = 0  # the task's count as last recorded here

    def check(self) -> None:
        if self._cap and self._made >= self._cap:
            raise ModelBudgetExceeded(
                f"the task made {self._made} model requests, its limit is {self._cap}"
            )

    async def charge(self, model: Model, usage: Usage) -> None:
        self._made = await self._meter.record(self._task, self._charge(model, usage))
        if self._cap and self._made > self._cap:
            self.check()

    def _charge(self, model: Model, usage: Usage) -> ModelCharge:
        route = route_of(model)
        cost = self._prices.cost(
            f"{route.provider}:{route.model}",
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_tokens,
            usage.cache_write_tokens,
        )
        return ModelCharge(
            route,
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_tokens,
            usage.cache_write_tokens,
            cost,
        )


def route_of(model: Model) -> Route:
    """The route a model answers on: its own (`HTTPModel.route`, through any wrapper), or
    one read from its name (a double in tests)."""
    route = getattr(model, "route", None)
    if isinstance(route, Route):
        return route
    provider, _, name = model.name.partition(":")
    return Route(provider, name) if name else Route("unknown", provider)


class _MeteredAttempts:
    """The ladder, with every model it hands an attempt charged to one task's allowance
    (when there is one) and made the task's: its person named, refused attachments
    withheld (the task's `Withheld`, shared by its rounds, subtasks and routes)."""

    def __init__(
        self,
        inner: Attempts,
        allowance: _Allowance | None,
        end_user: str | None = None,
        refusals: AttachmentRefusals | None = None,
        withheld: Withheld | None = None,
    ) -> None:
        self._inner = inner
        self._allowance = allowance
        self._end_user = end_user
        self._refusals = refusals
        self._withheld = withheld if withheld is not None else Withheld()

    async def run(self, attempt: Callable[[Model], Awaitable[T]]) -> Answered[T]:
        async def metered(model: Model) -> T:
            charged = _MeteredModel(model, self._allowance) if self._allowance else model
            return await attempt(
                TaskModel(
                    charged,
                    end_user=self._end_user,
                    refusals=self._refusals,
                    withheld=self._withheld,
                )
            )

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
        await self._allowance.charge(self._inner, response.usage)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self._allowance.check()
        usage: Usage | None = None
        async for event in self._inner.stream(request):
            if isinstance(event, Finish):
                usage = event.usage
            yield event
        await self._allowance.charge(self._inner, usage or Usage())

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
