"""The task runner and its tools, assembled from settings for the workers and the console.

`build_runner` wires the agent's round loop to Postgres (the queue, delegations, history,
memory, usage, approvals) and to a publisher; `start_mcp` connects the MCP servers whose
tools the runner offers. Both take explicit arguments: the workers' assembly
(gateway/process/workers.py) passes Slack's publisher and the operator alerts, the console
(gateway/operator/console.py) its terminal.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

from agent import (
    NO_TRACER,
    AlertSink,
    ApprovalDesk,
    AttemptLadder,
    CircuitBreaker,
    Compaction,
    CompactionSettings,
    FailureNotices,
    LiveView,
    McpClients,
    Model,
    ModelResponder,
    OutageTracker,
    PolicyOf,
    Publisher,
    ResponderPorts,
    ResponderSettings,
    RoundSettings,
    RunnerPorts,
    RunnerSettings,
    SubtaskRegistry,
    TaskRunner,
    ThreadReader,
    ToolObserver,
    ToolRegistry,
    Tracer,
    default_registries,
)
from gateway.config.settings import Settings
from gateway.models.routes import end_user_of, retry_policy
from gateway.telemetry.metrics import Metrics, ToolCallCounter
from gateway.telemetry.outcomes import TaskOutcomes
from gateway.telemetry.tool_observers import ToolObservers
from storage import (
    Database,
    PostgresApprovals,
    PostgresAttachmentRefusals,
    PostgresDelegations,
    PostgresHistory,
    PostgresMemory,
    PostgresModelWaits,
    PostgresSteering,
    PostgresSummaries,
    PostgresTaskQueue,
    PostgresToolCalls,
    PostgresUsageMeter,
    QueueModes,
)

log = logging.getLogger(__name__)

# How long start-up waits for the MCP servers' first connection attempts (they go on
# trying afterwards): a server launched with `npx` may download itself first.
MCP_STARTUP_SECONDS = 30.0


@dataclass(frozen=True)
class RunnerParts:
    """Where a runner's work goes besides Postgres: the `publisher` that delivers, the
    operator `alerts`, and what only a Slack process has (thread reads, the live view, a
    `desk` to ask approvals at, channel `policies`, metrics, traces). Without a desk (the
    console) tools that need approval are not offered (agent/core/approval.py)."""

    publisher: Publisher
    alerts: AlertSink
    registries: tuple[ToolRegistry, SubtaskRegistry] | None = None  # tools, subtask types
    tool_observer: ToolObserver | None = None
    thread_reader: ThreadReader | None = None
    live: LiveView | None = None
    desk: ApprovalDesk | None = None
    policies: PolicyOf | None = None  # each channel's boundary; ladders share `circuit`
    circuit: CircuitBreaker | None = None
    outage: OutageTracker | None = None  # every route down, or one back (shared too)
    metrics: Metrics | None = None
    tracer: Tracer = NO_TRACER
    # Each channel's thread queue mode, asked at every claim (None: THREADGATE_THREAD_QUEUE).
    queue_modes: Callable[[], QueueModes] | None = None


def build_runner(
    settings: Settings, db: Database, models: list[Model], parts: RunnerParts
) -> TaskRunner:
    """The task runner on Postgres, answering through `models` (in fallback order)."""
    approvals = PostgresApprovals(db) if parts.desk is not None else None
    respond = build_responder(settings, db, models, parts, approvals)
    lease = settings.database.lease_seconds
    deployment = QueueModes(settings.tasks.thread_queue)
    modes = parts.queue_modes or (lambda: deployment)
    return TaskRunner(
        RunnerPorts(
            queue=PostgresTaskQueue(db, lease_seconds=lease, modes=modes),
            delegations=PostgresDelegations(db, lease_seconds=lease),
            history=PostgresHistory(db, max_pinned=settings.memory.pinned_max),
            publisher=parts.publisher,
            alerts=parts.alerts,
            observer=TaskOutcomes(parts.metrics),  # counted, and logged one line per outcome
            live=parts.live,
            memory=PostgresMemory(db),
            approvals=approvals,
            desk=parts.desk,
            tracer=parts.tracer,
            waits=PostgresModelWaits(db),
        ),
        respond,
        settings=runner_settings(settings),
        compaction=build_compaction(settings, db, respond, parts.metrics),
    )


def build_responder(
    settings: Settings,
    db: Database,
    models: list[Model],
    parts: RunnerParts,
    approvals: PostgresApprovals | None,
) -> ModelResponder:
    """One round loop per task: the ladder over `models`, the tools, the stores it reads."""
    tools, subtask_types = parts.registries or default_registries()
    metrics = parts.metrics
    ladder = AttemptLadder(
        models,
        policy=retry_policy(settings),
        circuit=parts.circuit,
        on_attempt=metrics.on_attempt if metrics else None,
        outage=parts.outage,
    )
    return ModelResponder(
        ladder,
        tools=tools,
        subtasks=subtask_types,
        policies=parts.policies,
        ports=ResponderPorts(
            thread_reader=parts.thread_reader,
            tool_observer=parts.tool_observer,
            live=parts.live,
            meter=PostgresUsageMeter(db),
            memory=PostgresMemory(db),
            approvals=approvals,
            refusals=PostgresAttachmentRefusals(db),
            steering=PostgresSteering(db),
        ),
        settings=ResponderSettings(
            round=RoundSettings(
                max_output_tokens=settings.models.max_output_tokens,
                tool_timeout_seconds=settings.tools.timeout_seconds,
                tool_output_chars=settings.tools.output_chars,
            ),
            max_model_requests=settings.limits.model_requests_per_task,
            instructions=settings.memory.instructions,
            prices=settings.models.price_table(),
            prompt_caching=settings.models.prompt_caching,
            end_user=end_user_of if settings.models.send_user_id else None,
        ),
    )


def build_compaction(
    settings: Settings, db: Database, respond: ModelResponder, metrics: Metrics | None
) -> Compaction | None:
    """Older turns summarized once the history passes its budget (THREADGATE_COMPACTION)."""
    if not settings.memory.compaction:
        return None
    return Compaction(
        PostgresSummaries(db),
        respond.ask_text,
        epoch=respond.epoch_of,
        settings=CompactionSettings(
            max_chars=settings.memory.history_chars,
            keep_chars=settings.memory.history_chars // 2,
        ),
        observe=metrics.compacted if metrics else lambda outcome: None,
    )


def runner_settings(settings: Settings) -> RunnerSettings:
    lease = settings.database.lease_seconds
    return RunnerSettings(
        workers=settings.tasks.workers,
        heartbeat_seconds=lease / 3,
        history_chars=settings.memory.history_chars,
        max_rounds=settings.tasks.max_rounds,
        subtask_timeout_seconds=settings.tasks.subtask_timeout_seconds,
        max_deferrals=settings.tasks.max_deferrals,
        max_deferral_seconds=settings.tasks.max_deferral_seconds,
        still_trying_seconds=settings.tasks.models_down_notice_seconds,
        task_timeout_seconds=settings.tasks.task_timeout_seconds,
        notices=FailureNotices(override=settings.tasks.failure_notice),
        approval_timeout_seconds=settings.tools.approval_timeout_seconds,
    )


async def start_mcp(settings: Settings, tools: ToolRegistry, stack: AsyncExitStack) -> McpClients:
    """Connect the configured MCP servers, their tools going into `tools`; closed by `stack`.

    Waits for each server's first attempt (at most `MCP_STARTUP_SECONDS`); one that failed
    is logged and retried in the background, never a reason not to serve."""
    clients = McpClients(settings.tools.mcp_config(), tools)
    clients.start()
    stack.push_async_callback(clients.aclose)
    await clients.wait_settled(MCP_STARTUP_SECONDS)
    for state in clients.states():
        if not state.connected:
            log.warning(
                "MCP server %s is not connected yet (%s): its tools are not offered until "
                "it is; retrying in the background",
                state.name,
                state.error or "still connecting",
            )
    return clients


def mcp_connected(clients: McpClients) -> dict[str, Callable[[], bool]]:
    """Whether each MCP server is connected now, by name (`threadgate_mcp_server_up`)."""
    return {s.name: functools.partial(_connected, clients, s.name) for s in clients.states()}


def _connected(clients: McpClients, name: str) -> bool:
    return any(state.connected for state in clients.states() if state.name == name)


def tool_observer(
    db: Database,
    metrics: Metrics,
    mcp: McpClients,
    shown: ToolObserver | None = None,
    spans: ToolObserver | None = None,
) -> ToolObservers:
    """Every tool call stored (`tool_calls`), counted (`threadgate_tool_calls_total`), with
    `shown` shown in its thread while it runs, and with `spans` traced."""
    observers: list[ToolObserver] = [PostgresToolCalls(db), ToolCallCounter(metrics, mcp.origin)]
    return ToolObservers([*observers, *(o for o in (shown, spans) if o is not None)])
