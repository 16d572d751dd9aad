"""Prometheus metrics, in a registry of the gateway's own.

The registry is per `Gateway` (never the process-global one), so two gateways in one test
process do not collide. The agent knows nothing of Prometheus: the runner reports through
`agent.RunnerObserver`, the ladder through its `on_attempt` callback, and models
are wrapped by `MeteredModel`; this module turns those into series.

`MeteredModel` also prices each answer (`threadgate_model_cost_usd_total`, by model: not
by user or channel, whose number has no bound — `threadgate usage` has those) and records
it as a span of the message's trace, named and labelled as OpenTelemetry's GenAI
conventions say (`chat {model}`, `gen_ai.*`), through the `agent.Tracer` it is given.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agent import (
    DEFAULT_PRICE_TABLE,
    NO_TRACER,
    Attributes,
    Model,
    ModelRequest,
    ModelResponse,
    PriceTable,
    Route,
    Showing,
    StreamEvent,
    Task,
    ToolCallRecord,
    Tracer,
    Usage,
    Watch,
    route_of,
)
from storage import LIMIT_SCOPES, ConnectionPool

# How a schedule's period can end (`threadgate_schedule_runs_total`).
SCHEDULE_OUTCOMES = ("posted", "silent", "failed", "skipped", "limited", "paused")
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.events = Counter(
            "threadgate_events_total",
            "Slack event deliveries by outcome (admitted, duplicate, ignored, limited, refused, rejected, unauthorized; edited, deleted for edits and deletions).",
            ["outcome"],
            registry=r,
        )
        self.retention_deleted = Counter(
            "threadgate_retention_deleted_total",
            "Rows the retention job deleted, by table (storage/retention.py).",
            ["table"],
            registry=r,
        )
        self.ack_seconds = Histogram(
            "threadgate_ack_seconds",
            "From request received to ack sent, admission included.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.loop_lag = Histogram(
            "threadgate_event_loop_lag_seconds",
            "How late a quarter-second timer woke on each event loop of the process (`loop`:"
            " ingress, workers, or all when one loop runs both): how long ready work waited"
            " its turn (gateway/telemetry/loop_lag.py).",
            ["loop"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.limited = Counter(
            "threadgate_limited_messages_total",
            "Messages acked but not answered because a limit refused them, by the limit"
            " (user, thread, user_tokens, channel_tokens, all_tokens, channel_spend,"
            " workspace_spend), or their channel was refused (external: shared with another"
            " organization; unverified: its sharing could not be checked).",
            ["scope"],
            registry=r,
        )
        for scope in LIMIT_SCOPES:  # every limit shows, at 0 until it first refuses
            self.limited.labels(scope)
        self.tasks = Counter(
            "threadgate_tasks_total",
            "Tasks settled, by outcome (request_cap: stopped by the cap on model requests;"
            " stopped: someone pressed Stop in the thread).",
            ["outcome"],
            registry=r,
        )
        self.schedule_runs = Counter(
            "threadgate_schedule_runs_total",
            "Periods of schedules, by outcome: posted, silent (no_reply), failed; skipped"
            " (missed while down, skip); limited (a daily token budget was spent); paused"
            " (its channel or workspace is gone).",
            ["outcome"],
            registry=r,
        )
        for outcome in SCHEDULE_OUTCOMES:
            self.schedule_runs.labels(outcome)
        self.tokens_today = Gauge(
            "threadgate_tokens_today",
            "Tokens every replica used today (UTC), as stored for the daily budgets, by direction.",
            ["direction"],
            registry=r,
        )
        self.rounds = Counter(
            "threadgate_rounds_total", "Rounds run, by decision.", ["decision"], registry=r
        )
        self.subtasks = Counter(
            "threadgate_subtasks_total", "Subtasks ended, by state.", ["state"], registry=r
        )
        self.model_calls = Counter(
            "threadgate_model_attempts_total",
            "Attempts on a model slot, by outcome (ok, transient, failed, credential, quota, circuit_open).",
            ["slot", "model", "outcome"],
            registry=r,
        )
        self.model_seconds = Histogram(
            "threadgate_model_request_seconds",
            "Latency of one model request.",
            ["slot", "model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "threadgate_model_tokens_total",
            "Tokens by kind.",
            ["slot", "model", "kind"],
            registry=r,
        )
        self.cost = Counter(
            "threadgate_model_cost_usd_total",
            "What the model answers cost, in USD by the price table (THREADGATE_PRICES over"
            " the built-in one), by model; answers of a model it has no price for are counted"
            " in threadgate_model_unpriced_answers_total instead.",
            ["model"],
            registry=r,
        )
        self.unpriced = Counter(
            "threadgate_model_unpriced_answers_total",
            "Model answers the price table has no price for (their cost is unknown), by model.",
            ["model"],
            registry=r,
        )
        self.slack_calls = Counter(
            "threadgate_slack_api_calls_total",
            "Slack Web API calls by method and status (ok or Slack's error code).",
            ["method", "status"],
            registry=r,
        )
        self.streams = Counter(
            "threadgate_streamed_messages_total",
            "Streamed messages by kind (reply, plan) and how they ended: completed (stopped"
            " as streamed), replaced (completed by chat.update: the text differed, or a"
            " stream a crashed process left), taken_back (a draft that was not the reply),"
            " refused (Slack would not stream; posted whole).",
            ["kind", "outcome"],
            registry=r,
        )
        self.feedback = Counter(
            "threadgate_feedback_total",
            "Votes cast or changed on replies with Slack's feedback buttons, by value"
            " (positive, negative); a repeated click is not counted.",
            ["value"],
            registry=r,
        )
        self.approvals = Counter(
            "threadgate_approval_clicks_total",
            "Clicks on approval requests, by outcome (approved, denied; refused: not the"
            " asker nor an approver; already: decided before; ended, unknown).",
            ["outcome"],
            registry=r,
        )
        self.tool_calls = Counter(
            "threadgate_tool_calls_total",
            "Work-tool calls ended, by MCP server (builtin: threadgate's own and plugins'),"
            " tool and outcome (ok, error).",
            ["server", "tool", "outcome"],
            registry=r,
        )
        self.attached_files = Counter(
            "threadgate_attached_files_total",
            "Files attached to messages, by kind (image, text, pdf, other) and outcome (read,"
            " or why not: type_not_allowed, too_large, download_failed, not_downloaded_in_time…).",
            ["kind", "outcome"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "threadgate_queue_depth", "Unfinished tasks (queued, running or waiting).", registry=r
        )
        self.oldest_task_seconds = Gauge(
            "threadgate_oldest_task_age_seconds", "Age of the oldest unfinished task.", registry=r
        )
        self.db_pool_wait_seconds = Histogram(
            "threadgate_db_pool_wait_seconds",
            "How long a statement waited for a database connection because every one of the"
            " pool's was lent out (a free connection is taken without waiting: not counted).",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=r,
        )
        self.db_pool_connections = Gauge(
            "threadgate_db_pool_connections",
            "This process's database connections: lent (running a statement or a"
            " transaction now), open (open, being opened or being closed), max (the pool's"
            " size; every replica's max counts against the server's max_connections).",
            ["state"],
            registry=r,
        )
        self.db_pool_waiting = Gauge(
            "threadgate_db_pool_waiting",
            "Statements waiting for a database connection now.",
            registry=r,
        )
        self.pins = Counter(
            "threadgate_pins_total",
            "Pin events by outcome: pinned, retained (a message we never stored, kept for its"
            " pin), unpinned, ignored (not a message of a conversation we keep), failed.",
            ["outcome"],
            registry=r,
        )
        self.compactions = Counter(
            "threadgate_compactions_total",
            "Summaries of what outgrew a thread's window, by outcome: summarized, failed"
            " (the older turns were dropped instead, as without compaction).",
            ["outcome"],
            registry=r,
        )
        for outcome in ("summarized", "failed"):  # both show, at 0 until the first
            self.compactions.labels(outcome)
        self.secrets_redacted = Counter(
            "threadgate_secrets_redacted_total",
            "Credentials taken out of what people wrote (messages, edits, back-filled"
            " messages, file text) before it was stored or shown to a model, by kind.",
            ["kind"],
            registry=r,
        )

    def watch_pool(self, pool: ConnectionPool) -> None:
        """The pool gauges read `pool` when scraped."""
        self.db_pool_connections.labels("lent").set_function(lambda: pool.lent)
        self.db_pool_connections.labels("open").set_function(lambda: pool.size)
        self.db_pool_connections.labels("max").set_function(lambda: pool.max_size)
        self.db_pool_waiting.set_function(lambda: pool.waiting)

    def on_attempt(self, route: Route, outcome: str) -> None:
        self.model_calls.labels(str(route.slot), f"{route.provider}:{route.model}", outcome).inc()

    def message_limited(self, scope: str) -> None:
        self.limited.labels(scope).inc()

    def task_settled(self, outcome: str) -> None:
        self.tasks.labels(outcome).inc()

    def schedule_run_settled(self, outcome: str) -> None:
        self.schedule_runs.labels(outcome).inc()

    def stream_ended(self, kind: str, outcome: str) -> None:
        self.streams.labels(kind, outcome).inc()

    def round_decided(self, decision: str) -> None:
        self.rounds.labels(decision).inc()

    def retention_deleted_rows(self, table: str, count: int) -> None:
        """`storage.Retention`'s counter callback."""
        self.retention_deleted.labels(table).inc(count)

    def subtask_settled(self, state: str) -> None:
        self.subtasks.labels(state).inc()

    def file_read(self, kind: str, outcome: str) -> None:
        self.attached_files.labels(kind, outcome).inc()

    def pin_settled(self, outcome: str) -> None:
        self.pins.labels(outcome).inc()

    def compacted(self, outcome: str) -> None:
        self.compactions.labels(outcome).inc()

    def redacted(self, kinds: Mapping[str, int]) -> None:
        """What one admission or edit took out, by kind (every kind of
        gateway/text/secrets.py shows, at 0, once `show_kinds` named them)."""
        for kind, count in kinds.items():
            self.secrets_redacted.labels(kind).inc(count)

    def show_kinds(self, kinds: Iterable[str]) -> None:
        for kind in kinds:
            self.secrets_redacted.labels(kind)


Origin = Callable[[str], "tuple[str, str] | None"]


class ToolCallCounter:
    """`agent.ToolObserver` that counts each ended call in `threadgate_tool_calls_total`.

    `origin` maps an offered name to its (MCP server, tool); other tools are "builtin"."""

    def __init__(self, metrics: Metrics, origin: Origin = lambda name: None) -> None:
        self._metrics = metrics
        self._origin = origin

    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        if record.state == "running":
            return
        server, tool = self._origin(record.name) or ("builtin", record.name)
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
