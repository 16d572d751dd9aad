"""Prometheus metrics, in a registry of the gateway's own.

The registry is per `Gateway` (never the process-global one), so two gateways in one test
process do not collide. The agent knows nothing of Prometheus: the runner reports through
`agent.RunnerObserver`, the ladder through its `on_attempt` callback, and models
are wrapped by `MeteredModel`; this module turns those into series.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agent import (
    Model,
    ModelRequest,
    ModelResponse,
    Route,
    Showing,
    StreamEvent,
    Task,
    ToolCallRecord,
    Watch,
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
            "Slack event deliveries by outcome (admitted, duplicate, ignored, limited, rejected, unauthorized; edited, deleted for edits and deletions).",
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
        self.limited = Counter(
            "threadgate_limited_messages_total",
            "Messages acked but not answered because a limit refused them, by the limit"
            " (user, thread, user_tokens, channel_tokens, all_tokens).",
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
    """A model that reports latency and tokens of every request it answers."""

    def __init__(self, inner: Model, metrics: Metrics, slot: int) -> None:
        self.name = inner.name
        self._inner = inner
        self._labels = (str(slot), inner.name)
        self._metrics = metrics

    async def request(
        self,
        request: ModelRequest,
        *,
        watch: Watch | None = None,
        showing: Showing | None = None,
    ) -> ModelResponse:
        started = time.perf_counter()
        try:
            response = await self._inner.request(request, watch=watch, showing=showing)
        finally:
            self._metrics.model_seconds.labels(*self._labels).observe(time.perf_counter() - started)
        usage = response.usage
        for kind, count in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cached", usage.cached_tokens),
            ("reasoning", usage.reasoning_tokens),
        ):
            if count:
                self._metrics.tokens.labels(*self._labels, kind).inc(count)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        async for event in self._inner.stream(request):
            yield event

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __getattr__(self, name: str) -> object:
        # `route`, `streaming` and the like belong to the wrapped model.
        return getattr(self._inner, name)
