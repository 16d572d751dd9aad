"""Prometheus metrics, in a registry of the gateway's own.

The registry is per `Gateway` (never the process-global one), so two gateways in one test
process do not collide. The agent knows nothing of Prometheus: the runner reports through
`agent.RunnerObserver`, the ladder through its `on_attempt` callback, and models
are wrapped by `MeteredModel`; this module turns those into series.

`Metrics` is the one object the rest of the gateway takes; its families are declared in
groups by concern (metric_families.py: Slack events, messages, models, Slack calls, the
slash command and App Home, tasks, the queue, the database, the build and connections),
each a base of `Metrics`, so `metrics.events` and
`metrics.task_settled` read as they always did while each concern reads on its own.

`MeteredModel` also prices each answer (`threadgate_model_cost_usd_total`, by model: not
by user or channel, whose number has no bound — `threadgate usage` has those) and records
it as a span of the message's trace, named and labelled as OpenTelemetry's GenAI
conventions say (`chat {model}`, `gen_ai.*`), through the `agent.Tracer` it is given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from agent import (
    DEFAULT_PRICE_TABLE,
    NO_TRACER,
    Attributes,
    Model,
    ModelRequest,
    ModelResponse,
    PriceTable,
    Showing,
    StreamEvent,
    Task,
    ToolCallRecord,
    Tracer,
    Usage,
    Watch,
    route_of,
)
from gateway.telemetry.metric_families import (
    ConnectionFamilies,
    DatabaseFamilies,
    EventFamilies,
    MessageFamilies,
    ModelFamilies,
    QueueFamilies,
    SlackFamilies,
    SurfaceFamilies,
    TaskFamilies,
)

log = logging.getLogger(__name__)


@dataclass
class Metrics(
    EventFamilies,
    MessageFamilies,
    ModelFamilies,
    SlackFamilies,
    SurfaceFamilies,
    TaskFamilies,
    QueueFamilies,
    DatabaseFamilies,
    ConnectionFamilies,
):
    """Every group's families in one registry, and every group's verbs."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        # The dataclass's own __init__ stands in for the groups'; each declares its part here.
        EventFamilies.__init__(self, self.registry)
        MessageFamilies.__init__(self, self.registry)
        ModelFamilies.__init__(self, self.registry)
        SlackFamilies.__init__(self, self.registry)
        SurfaceFamilies.__init__(self, self.registry)
        TaskFamilies.__init__(self, self.registry)
        QueueFamilies.__init__(self, self.registry)
        DatabaseFamilies.__init__(self, self.registry)
        ConnectionFamilies.__init__(self, self.registry)


Origin = Callable[[str], "tuple[str, str] | None"]


class ToolCallCounter:
    """`agent.ToolObserver` that counts each ended call in `threadgate_tool_calls_total`,
    and each progress report in `threadgate_tool_progress_total`.

    `origin` maps an offered name to its (MCP server, tool); other tools are "builtin"."""

    def __init__(self, metrics: Metrics, origin: Origin = lambda name: None) -> None:
        self._metrics = metrics
        self._origin = origin

    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        if record.state == "running" and record.progress is None:
            return
        server, tool = self._origin(record.name) or ("builtin", record.name)
        if record.progress is not None:
            self._metrics.tool_progress.labels(server, tool).inc()
        else:
            self._metrics.tool_calls.labels(server, tool, record.state).inc()


class MeteredModel(Model):
    """A model that reports latency, tokens and cost of every request it answers, each
    request a span (module docstring)."""

    def __init__(
        self,
        inner: Model,
        metrics: Metrics,
        slot: int,
        *,
        prices: PriceTable = DEFAULT_PRICE_TABLE,
        tracer: Tracer = NO_TRACER,
    ) -> None:
        self.name = inner.name
        self._inner = inner
        self._labels = (str(slot), inner.name)
        self._metrics = metrics
        self._prices = prices
        self._tracer = tracer
        route = route_of(inner)
        self._route = f"{route.provider}:{route.model}"
        self._span_name = f"chat {route.model}"
        self._request_attributes: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": route.provider,
            "gen_ai.request.model": route.model,
            "threadgate.model.slot": slot,
        }

    async def request(
        self,
        request: ModelRequest,
        *,
        watch: Watch | None = None,
        showing: Showing | None = None,
    ) -> ModelResponse:
        with self._tracer.span(self._span_name, self._request_attributes, kind="client") as span:
            started = time.perf_counter()
            try:
                response = await self._inner.request(request, watch=watch, showing=showing)
            except Exception as exc:
                # The record of a failed request (httpx's own line is DEBUG only: logs.py).
                log.info("model request to %s failed: %s", self.name, exc)
                raise
            finally:
                elapsed = time.perf_counter() - started
                self._metrics.model_seconds.labels(*self._labels).observe(elapsed)
            cost = self._count(response.usage)
            span.set(_answer_attributes(response, cost))
        return response

    def _count(self, usage: Usage) -> float | None:
        """Count the answer's tokens and cost; the cost in USD (None: unpriced)."""
        for kind, count in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cached", usage.cached_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("reasoning", usage.reasoning_tokens),
        ):
            if count:
                self._metrics.tokens.labels(*self._labels, kind).inc(count)
        cost = self._prices.cost(
            self._route,
            usage.input_tokens,
            usage.output_tokens,
            usage.cached_tokens,
            usage.cache_write_tokens,
        )
        if cost is None:
            self._metrics.unpriced.labels(self.name).inc()
            return None
        self._metrics.cost.labels(self.name).inc(float(cost))
        return float(cost)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        async for event in self._inner.stream(request):
            yield event

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __getattr__(self, name: str) -> object:
        # `route`, `streaming` and the like belong to the wrapped model.
        return getattr(self._inner, name)


def _answer_attributes(response: ModelResponse, cost: float | None) -> Attributes:
    """What a model span learns from the answer (GenAI conventions, and our cost)."""
    usage = response.usage
    attributes: dict[str, str | int | float | bool | tuple[str, ...]] = {
        "gen_ai.response.model": response.model,
        "gen_ai.response.finish_reasons": (response.finish_reason,),
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
    }
    if cost is not None:
        attributes["threadgate.cost_usd"] = cost
    return attributes
