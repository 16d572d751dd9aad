"""The workers assembly: queued tasks answered, schedules fired, old rows pruned.

The workers open the model routes (an ingress opens none), connect the MCP servers before
the first task is claimed so the first messages already see their tools, and run the task
runner (agent/durable/runner.py) with Slack's publisher, the retention job, the sweep
of uninstalled workspaces' erasures (storage/erasure.py) and the scheduler. They meet the
ingress only in Postgres: admission queues a task, and any worker's lease claims it
(storage/queue.py). All they need is `Resources`
(gateway/process/resources.py) and the circuit their ladders share with the channels'.

With `THREADGATE_WORKSPACE_SEARCH` on, the tools include `search_workspace`
(gateway/slack/search_tool.py).

An MCP server that does not connect in time does not stop `serve`: it is logged, its
tools are not offered, and its connection keeps retrying in the background.
"""

from __future__ import annotations

import functools
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from typing import Any

from agent import (
    CircuitBreaker,
    McpClients,
    OutageTracker,
    SubtaskRegistry,
    ToolRegistry,
    default_registries,
    schedule_tools,
)
from gateway.delivery.publisher import PublisherSettings, SlackPublisher
from gateway.delivery.streams import StreamSettings
from gateway.models.routes import metered_models
from gateway.process.channel_policies import limits
from gateway.process.outages import watch_outages
from gateway.process.resources import Resources, background, tool_spans
from gateway.process.runner import (
    RunnerParts,
    build_runner,
    mcp_connected,
    start_mcp,
    tool_observer,
)
from gateway.schedules.preflight import Preflight
from gateway.schedules.scheduler import Scheduler, Timing, tell_paused
from gateway.slack.search_tool import SearchWorkspace, search_tool
from storage import PersonSchedules, PostgresScheduleBook, Retention, ScheduleCaps

# How often the workers look for erasures of uninstalled workspaces that are due or that
# the uninstall's own try did not finish (a restart, a failure).
ERASURE_SWEEP_SECONDS = 60.0


class Workers:
    """Answers queued tasks with `resources`; `start` it on a stack that stops it."""

    def __init__(
        self, resources: Resources, circuit: CircuitBreaker, outage: OutageTracker | None = None
    ) -> None:
        self._r = resources
        self._circuit = circuit
        self._outage = outage
        self.mcp: McpClients | None = None
        self.started = False  # the task runner runs: a worker's /readyz waits for it

    async def start(self, stack: AsyncExitStack) -> None:
        publisher = self._publisher()
        stack.push_async_callback(publisher.aclose)
        registries = self._registries(publisher)
        self.mcp = await start_mcp(self._r.settings, registries[0], stack)
        self._r.metrics.watch_mcp(mcp_connected(self.mcp))
        await self._start_runner(stack, registries, publisher)
        background(stack, "retention", self._retention())
        background(
            stack,
            "erasure",
            self._r.erasure().run_every(
                ERASURE_SWEEP_SECONDS, self._r.metrics.erasures_pending.set
            ),
        )
        background(stack, "scheduler", self._scheduler())
        self.started = True

    def _registries(self, desk: SlackPublisher) -> tuple[ToolRegistry, SubtaskRegistry]:
        registries = default_registries()
        s = self._r.settings
        bounds = PersonSchedules(
            minimum_seconds=s.schedules.person_min_period_seconds,
            caps=ScheduleCaps(s.schedules.per_person, s.schedules.per_channel),
            approval_seconds=s.tools.approval_timeout_seconds,
        )
        book = PostgresScheduleBook(self._r.db, bounds, on_refused=self._r.metrics.schedule_refused)
        for tool in schedule_tools(book, desk):  # people's own schedules, owners asked
            registries[0].register(tool)
        if self._r.settings.tools.workspace_search:  # THREADGATE_WORKSPACE_SEARCH
            registries[0].register(self._search_tool())
        return registries

    def _search_tool(self) -> SearchWorkspace:
        """`search_workspace`, as the person who asked (gateway/slack/search_tool.py)."""
        r = self._r
        seconds = r.settings.slack.timeout_seconds
        return search_tool(
            r.clients, r.db, call_seconds=seconds, metrics=r.metrics, tracer=r.tracer
        )

    async def _start_runner(
        self,
        stack: AsyncExitStack,
        registries: tuple[ToolRegistry, SubtaskRegistry],
        publisher: SlackPublisher,
    ) -> None:
        r = self._r
        models = metered_models(r.settings, r.metrics, r.tracer)
        for model in models:
            stack.push_async_callback(model.aclose)
        assert self.mcp is not None  # connected just before
        parts = RunnerParts(
            publisher,
            r.operator_alerts(),
            registries=registries,
            tool_observer=tool_observer(
                r.db, r.metrics, self.mcp, shown=publisher, spans=tool_spans(r.tracer)
            ),
            thread_reader=r.clients,
            live=publisher if publisher.streaming else None,
            desk=publisher,
            policies=r.policies.policy_of,
            queue_modes=r.policies.queue_modes,
            circuit=self._circuit,
            outage=self._watched(),
            metrics=r.metrics,
            tracer=r.tracer,
        )
        runner = build_runner(r.settings, r.db, models, parts)
        runner.start()
        stack.push_async_callback(runner.stop)

    def _watched(self) -> OutageTracker | None:
        """The outage tracker, acted on (gateway/process/outages.py)."""
        r = self._r
        if self._outage is not None:
            alerts = r.operator_alerts() if r.settings.alerts.models_down else None
            watch_outages(self._outage, r.db, r.supervisor, r.metrics, alerts)
        return self._outage

    def _publisher(self) -> SlackPublisher:
        r, s = self._r, self._r.settings
        settings = PublisherSettings(
            status_refresh_seconds=s.delivery.status_refresh_seconds,
            status_delay_seconds=s.delivery.status_delay_seconds,
            # Reads retried within a few call limits, then one outcome.
            reconcile_seconds=4 * s.slack.timeout_seconds,
            streams=(
                StreamSettings(interval_seconds=s.delivery.stream_interval_seconds)
                if s.delivery.streaming
                else None
            ),
            # With many workspaces, each installation says who our bot is there.
            bot_user_id=r.identity.bot_user_id if r.identity else None,
            bot_id=r.identity.bot_id if r.identity else None,
        )
        return SlackPublisher(
            r.clients,
            r.outbox(),
            settings,
            on_stream_ended=r.metrics.stream_ended,
            on_passage_cited=r.metrics.passage_cited,
            tracer=r.tracer,
        )

    def _retention(self) -> Coroutine[Any, Any, None]:
        s = self._r.settings
        retention = Retention(
            self._r.db,
            days=s.database.retention_days,
            on_deleted=self._r.metrics.retention_deleted_rows,
        )
        return retention.run_every(s.database.retention_interval_seconds)

    def _scheduler(self) -> Coroutine[Any, Any, None]:
        """Each period of each schedule, one task (gateway/schedules/scheduler.py)."""
        r = self._r
        deployment = limits(r.settings)
        scheduler = Scheduler(
            r.db,
            Preflight(
                r.db,
                r.clients,
                lambda channel, shared: r.policies.rules_of(channel).refusal(shared),
            ),
            timing=Timing(late_seconds=r.settings.schedules.late_seconds),
            limits_of=lambda channel: r.policies.rules_of(channel).limits or deployment,
            observe=r.metrics.schedule_run_settled,
            tell_operators=functools.partial(tell_paused, r.operator_alerts()),
        )
        return scheduler.run()
