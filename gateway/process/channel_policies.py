"""The channel policy in force: the config file compiled for the agent and the gatekeeper,
swapped whole when the file is read again (SIGHUP).

`ChannelPolicies` turns each channel's effective entry (gateway/config/channel_config.py)
into the two halves that enforce it: an `agent.ChannelPolicy` for the responder (tools,
instructions, ladder, cap on model requests; `policy_of(task)`, by the task's channel) and
a `ChannelRules` for the gatekeeper (Slack Connect, limits; `rules_of(channel)`). A channel
the file does not name gets the default entry's.

A channel's own model means a ladder of its own: `Ladders` opens one per distinct set of
model specs, once, and every channel naming the same set shares it, and the circuit of
the deployment's ladder (a refused key is refused for every channel that uses it). Ladders
stay open until the gateway stops: a reload that drops a model may still have rounds
running on it.

The file is read in one place, the composition root (gateway/process/service.py): at
start and on each SIGHUP it reads it once and hands the same `ChannelConfig` to every
loop's `ChannelPolicies` (the workers' and the ingress thread's), so the gatekeeper and
the responder never enforce two readings of a file that changed in between. `put`
compiles the config before anything is swapped: the new policy replaces the old in one
assignment, so a round, a subtask or an admission sees one or the other, never a mix.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from agent import (
    NO_TRACER,
    Attempts,
    ChannelPolicy,
    CircuitBreaker,
    Model,
    OutageTracker,
    Task,
    ThreadQueueMode,
    Tracer,
)
from gateway.config.channel_config import ChannelConfig, ChannelLimits, Effective
from gateway.config.settings import Settings
from gateway.inbound.channel_rules import DEFAULT_RULES, ChannelRules
from gateway.inbound.gatekeeper import LIMIT_NOTICES
from gateway.models.routes import channel_ladder
from gateway.slack.address import SlackAddress
from gateway.telemetry.metrics import Metrics
from storage import Limits, PictureBudgets, QueueModes

log = logging.getLogger(__name__)

# Said in the prompt of a channel that answers Slack Connect (after its instructions).
EXTERNAL_NOTE = (
    "This channel may be shared with other organizations (Slack Connect). A turn whose tag "
    'has org="external" was written by someone outside the organization that runs you: '
    "do not tell them anything internal that the conversation does not already show them."
)


class Ladders:
    """One attempt ladder per distinct list of model specs, made once and shared."""

    def __init__(self, make: Callable[[tuple[str, ...]], tuple[Attempts, Sequence[Model]]]) -> None:
        # `make` opens the specs' models and builds their ladder: (ladder, models to close).
        self._make = make
        self._ladders: dict[tuple[str, ...], Attempts] = {}
        self._models: list[Model] = []

    def ladder(self, specs: tuple[str, ...]) -> Attempts:
        if (known := self._ladders.get(specs)) is None:
            known, models = self._make(specs)
            self._models.extend(models)
            self._ladders[specs] = known
        return known

    async def aclose(self) -> None:
        for model in self._models:
            await model.aclose()


@dataclass(frozen=True, slots=True)
class _Compiled:
    config: ChannelConfig  # what it was compiled from
    default: tuple[ChannelPolicy, ChannelRules] = (ChannelPolicy(), DEFAULT_RULES)
    channels: Mapping[str, tuple[ChannelPolicy, ChannelRules]] = field(default_factory=dict)
    queue_modes: QueueModes = field(default_factory=QueueModes)


class ChannelPolicies:
    """The policy of every channel, from the file `load` reads (see the module docstring)."""

    def __init__(
        self,
        config: ChannelConfig,
        *,
        models: tuple[str, ...],
        limits: Limits,
        max_model_requests: int,
        ladders: Ladders | None = None,
        thread_queue: ThreadQueueMode = "collect",
    ) -> None:
        self._models = models  # the deployment's specs (THREADGATE_MODEL, _FALLBACK_MODEL)
        self._thread_queue = thread_queue  # THREADGATE_THREAD_QUEUE
        self._limits = limits
        self._max_requests = max_model_requests
        self._ladders = ladders
        self._compiled = self._compile(config)

    def policy_of(self, task: Task) -> ChannelPolicy:
        """`agent.PolicyOf`: the policy of the task's channel."""
        return self._of(SlackAddress.parse(task.address).channel)[0]

    def rules_of(self, channel: str) -> ChannelRules:
        """`RulesOf`: what the gatekeeper enforces in `channel`."""
        return self._of(channel)[1]

    def queue_modes(self) -> QueueModes:
        """Every channel's thread queue mode, as the task queue's claims read it."""
        return self._compiled.queue_modes

    @property
    def config(self) -> ChannelConfig:
        """The channel config in force (the very value `put` was handed)."""
        return self._compiled.config

    def put(self, config: ChannelConfig) -> None:
        """Put `config` in force, whole (a `ConfigError` from compiling it keeps the policy
        in force)."""
        self._compiled = self._compile(config)

    async def aclose(self) -> None:
        """Close the channels' models (the gateway is stopping)."""
        if self._ladders is not None:
            await self._ladders.aclose()

    def _of(self, channel: str) -> tuple[ChannelPolicy, ChannelRules]:
        compiled = self._compiled  # one read: the whole of one policy or the other
        return compiled.channels.get(channel, compiled.default)

    def _compile(self, config: ChannelConfig) -> _Compiled:
        default = config.effective(None, self._models)
        channels = {c: config.effective(c, self._models) for c in config.channels}
        base = default.thread_queue or self._thread_queue
        return _Compiled(
            config,
            self._pair(default),
            {c: self._pair(e) for c, e in channels.items()},
            QueueModes(base, {c: e.thread_queue or base for c, e in channels.items()}),
        )

    def _pair(self, effective: Effective) -> tuple[ChannelPolicy, ChannelRules]:
        limits = effective.limits
        ladder = None
        if effective.models is not None and self._ladders is not None:
            ladder = self._ladders.ladder(effective.models)
        policy = ChannelPolicy(
            tools=effective.tools,
            instructions=prompt_instructions(effective),
            attempts=ladder,
            max_model_requests=limits.model_requests_per_message,
            thread_queue=effective.thread_queue or self._thread_queue,
        )
        rules = ChannelRules(
            effective.external,
            channel_limits(self._limits, limits),
            effective.context_messages,
            policy.thread_queue,
        )
        return policy, rules


def channel_limits(deployment: Limits, own: ChannelLimits) -> Limits:
    """The deployment's limits with the channel's own in their place."""
    d = deployment
    return replace(
        d,
        user_messages_per_hour=_given(own.user_messages_per_hour, d.user_messages_per_hour),
        thread_messages_per_hour=_given(own.thread_messages_per_hour, d.thread_messages_per_hour),
        user_daily_tokens=_given(own.user_daily_tokens, d.user_daily_tokens),
        channel_daily_tokens=_given(own.channel_daily_tokens, d.channel_daily_tokens),
    )


def _given(own: int | None, deployment: int) -> int:
    return deployment if own is None else own


def prompt_instructions(effective: Effective) -> str:
    """What a channel adds to the system prompt: its instructions, and where Slack Connect
    is answered, what `org="external"` means."""
    if effective.external != "allow":
        return effective.instructions
    return "\n\n".join(part for part in (effective.instructions.strip(), EXTERNAL_NOTE) if part)


def compile_policies(
    settings: Settings,
    config: ChannelConfig,
    metrics: Metrics,
    circuit: CircuitBreaker | None,
    tracer: Tracer = NO_TRACER,
    *,
    outage: OutageTracker | None = None,
) -> ChannelPolicies:
    """The channel config (read by the composition root) compiled. With a `circuit` (a
    process that runs workers) each distinct set of channel models gets its ladder, opened
    when first asked for and sharing that circuit (and `outage`); without, no model is opened (an ingress
    calls none)."""
    ladders = None
    if circuit is not None:
        make = functools.partial(
            channel_ladder,
            settings,
            metrics=metrics,
            circuit=circuit,
            tracer=tracer,
            outage=outage,
        )
        ladders = Ladders(make)
    return ChannelPolicies(
        config,
        models=settings.models.specs,
        limits=limits(settings),
        max_model_requests=settings.limits.model_requests_per_task,
        ladders=ladders,
        thread_queue=settings.tasks.thread_queue,
    )


def limits(settings: Settings) -> Limits:
    """The guard rails admission enforces (0: that one is off)."""
    return Limits(
        user_messages_per_hour=settings.limits.user_messages_per_hour,
        thread_messages_per_hour=settings.limits.thread_messages_per_hour,
        user_daily_tokens=settings.limits.user_daily_tokens,
        channel_daily_tokens=settings.limits.channel_daily_tokens,
        all_daily_tokens=settings.limits.all_daily_tokens,
        channel_daily_spend_usd=settings.limits.channel_daily_spend_usd,
        workspace_daily_spend_usd=settings.limits.workspace_daily_spend_usd,
        notices=LIMIT_NOTICES,
        pictures=PictureBudgets(
            thread_bytes=settings.limits.thread_picture_bytes,
            workspace_daily_bytes=settings.limits.workspace_daily_picture_bytes,
        ),
    )
