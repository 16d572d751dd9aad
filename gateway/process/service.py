"""The composition root: storage, agent and Slack wired into one running gateway.

This is the only place that knows every part. It turns `Settings` into objects with
explicit arguments, starts them in dependency order (database, migrations, model slots,
MCP servers, workers, HTTP), and stops them in reverse.

`THREADGATE_ROLE` (or `serve --role`) picks the parts: an `ingress` takes Slack's events
(verify, admit, ack) and opens no model; a `worker` runs the task workers, the retention
job and the MCP clients behind a port with only /healthz and /readyz; `all` is both, its
ingress a second gateway on a thread and event loop of its own (THREADGATE_INGRESS_THREAD,
gateway/process/ingress_thread.py) so that an ack never waits behind reply work. They
meet in Postgres: admission queues a task, and any worker's lease claims it
(storage/queue.py), so any number of each can run against one database.

With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) set, every part gets one
tracer exporting over OTLP (gateway/telemetry/tracing.py, imported only then); without,
`agent.NO_TRACER`, and no OpenTelemetry module is loaded.

MCP servers are connected before the workers start, waiting at most
`MCP_STARTUP_SECONDS` for each one's first attempt, so the first messages already see
their tools. A server that does not connect does not stop `serve`: it is logged, its tools
are not offered, and its connection keeps retrying in the background.

The channel policies (`THREADGATE_CHANNEL_CONFIG`, gateway/process/channel_policies.py)
are compiled before anything is opened, so a bad file stops `serve` first; the responder
and every gatekeeper ask them per task and per message, and SIGHUP reads the file again
(`Gateway.reload`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import hashlib
import logging
import signal
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
from slack_sdk.web.async_client import AsyncWebClient

from agent import (
    NO_TRACER,
    AlertSink,
    ApprovalDesk,
    AttemptLadder,
    CircuitBreaker,
    Compaction,
    CompactionSettings,
    ConfigError,
    FailureNotices,
    LiveView,
    McpClients,
    Model,
    ModelResponder,
    PolicyOf,
    ProviderSettings,
    Publisher,
    RetryPolicy,
    RoundSettings,
    RunnerSettings,
    SubtaskRegistry,
    Supervisor,
    Task,
    TaskRunner,
    ThreadReader,
    ToolObserver,
    ToolRegistry,
    Tracer,
    default_registries,
    installed_providers,
    open_route,
    route_capabilities,
    schedule_tools,
    stop_task,
)
from gateway.config.settings import Settings, database_dsn
from gateway.delivery.alerts import AlertWindows, OperatorAlerts, TokenAlarm
from gateway.delivery.approval import ApprovalMessages
from gateway.delivery.publisher import SlackPublisher
from gateway.delivery.streams import StreamSettings
from gateway.inbound.app_home import AppHome
from gateway.inbound.attachments import FileReader
from gateway.inbound.bolt_app import build_bolt_app
from gateway.inbound.decoders import Decoders
from gateway.inbound.files import FileDownloader
from gateway.inbound.gatekeeper import (
    LIMIT_NOTICES,
    Gatekeeper,
    GatekeeperPorts,
    GatekeeperSettings,
    InFlight,
    Policy,
)
from gateway.inbound.interactions import Interactions
from gateway.inbound.pins import Pins
from gateway.inbound.revisions import Revisions
from gateway.inbound.socket_mode import SocketModeConnection, start_socket_mode
from gateway.inbound.stops import Stops
from gateway.process.channel_policies import ChannelPolicies, Ladders
from gateway.process.event_loop import loop_name
from gateway.process.http import (
    SERVER_LOG,
    Readiness,
    build_health_app,
    build_http_app,
    build_metrics_app,
)
from gateway.process.ingress_thread import IngressThread
from gateway.process.model_transport import model_transport
from gateway.process.tool_observers import ToolObservers
from gateway.schedules.scheduler import Scheduler, tell_paused
from gateway.slack.address import SlackAddress
from gateway.slack.client import MeteredWebClient, slack_client
from gateway.slack.errors import SlackError, SlackOutcomeUnknown, SlackRefused
from gateway.slack.file_info import FileInfo
from gateway.slack.oauth import (
    INSTALL_PATH,
    OPEN_INSTALLS,
    InstallAllowlist,
    InstalledIdentity,
    Uninstaller,
    oauth_flow,
)
from gateway.slack.scopes import bot_scopes
from gateway.slack.workspaces import SlackClients, label
from gateway.telemetry.loop_lag import watch_lag
from gateway.telemetry.metrics import MeteredModel, Metrics, ToolCallCounter
from gateway.text.secrets import KINDS as SECRET_KINDS
from storage import (
    Database,
    Limits,
    Outbox,
    PictureBudgets,
    PostgresAlertThrottle,
    PostgresApprovals,
    PostgresAttachmentRefusals,
    PostgresDelegations,
    PostgresHistory,
    PostgresInstallations,
    PostgresMemory,
    PostgresOAuthStates,
    PostgresScheduleBook,
    PostgresSummaries,
    PostgresTaskQueue,
    PostgresToolCalls,
    PostgresUsageMeter,
    Retention,
    StoredInstallation,
    TokenCipher,
    tokens_today,
)

log = logging.getLogger(__name__)

# How long start-up waits for the MCP servers' first connection attempts (they go on
# trying afterwards): a server launched with `npx` may download itself first.
MCP_STARTUP_SECONDS = 30.0


def provider_settings(settings: Settings) -> ProviderSettings:
    return ProviderSettings(
        openai_api_key=settings.openai_api_key,
        openai_base_url=settings.openai_base_url,
        anthropic_api_key=settings.anthropic_api_key,
        anthropic_base_url=settings.anthropic_base_url,
        gateway_header=settings.threadgate_gateway_header,
        gateway_token=settings.threadgate_gateway_token,
        timeout=settings.threadgate_model_timeout_seconds,
        transport=functools.partial(model_transport, workers=settings.threadgate_workers),
        sampling=settings.sampling,
    )


def open_models(settings: Settings) -> list[Model]:
    """The fallback chain's models, one per route in order; a bad route or a missing key
    is a ConfigError naming the setting."""
    providers = provider_settings(settings)
    variable = _routes_variable(settings)
    return [
        open_route(
            route, index=n, settings=providers, kinds=installed_providers(), variable=variable
        )
        for n, route in enumerate(settings.require_routes())
    ]


def reads_documents(settings: Settings) -> bool:
    """Whether some route reads PDFs natively (agent/models/capabilities.py): only then
    are PDFs themselves kept with their turns; every model reads their text anyway."""
    providers = provider_settings(settings)
    return any(
        route_capabilities(route, settings=providers, kinds=installed_providers()).documents
        for route in settings.routes(keys=False)
    )


def _routes_variable(settings: Settings) -> str:
    return "THREADGATE_ROUTES" if settings.threadgate_routes.strip() else "THREADGATE_MODEL"


def end_user_of(task: Task) -> str | None:
    """The id the providers are given for the person a task answers (THREADGATE_SEND_USER_ID):
    a hash of their workspace and Slack user id, never the id itself. The vendors ask for
    an opaque, stable id so their abuse detection can tell one person's requests from the
    rest of the deployment's; a Slack id would tell them who the person is in which
    workspace (and `users.info` turns it into a name and an email). The hash is salted with
    the workspace, so the same person has unrelated ids in two workspaces; it is not a
    secret (anyone holding a Slack id can compute it), only unreadable."""
    address = SlackAddress.parse(task.address)
    if address.user is None:
        return None
    team = address.user_team or address.team or ""
    digest = hashlib.sha256(f"threadgate-end-user:{team}:{address.user}".encode()).hexdigest()
    return f"tg-{digest[:32]}"


def retry_policy(settings: Settings) -> RetryPolicy:
    return RetryPolicy(
        attempts_per_slot=settings.threadgate_model_attempts,
        base_delay=settings.threadgate_model_retry_seconds,
    )


def channel_policies(
    settings: Settings,
    metrics: Metrics,
    circuit: CircuitBreaker | None,
    tracer: Tracer = NO_TRACER,
) -> ChannelPolicies:
    """The channel config compiled (a bad file is a ConfigError). With a `circuit` (a
    process that runs workers) each distinct set of channel models gets its ladder, opened
    now and sharing that circuit; without, no model is opened (an ingress calls none)."""
    ladders = None
    if circuit is not None:
        providers = provider_settings(settings)
        prices = settings.price_table()

        def make(specs: tuple[str, ...]) -> tuple[AttemptLadder, list[Model]]:
            variable = "THREADGATE_CHANNEL_CONFIG"
            models: list[Model] = [
                MeteredModel(
                    open_route(
                        settings.route_for(spec, variable=variable),
                        index=n,
                        settings=providers,
                        kinds=installed_providers(),
                        variable=variable,
                    ),
                    metrics,
                    n,
                    prices=prices,
                    tracer=tracer,
                )
                for n, spec in enumerate(specs)
            ]
            policy = retry_policy(settings)
            return AttemptLadder(
                models, policy=policy, circuit=circuit, on_attempt=metrics.on_attempt
            ), models

        ladders = Ladders(make)
    return ChannelPolicies(
        settings.channel_config,
        models=settings.model_specs,
        limits=limits(settings),
        max_model_requests=settings.threadgate_max_model_requests_per_task,
        ladders=ladders,
    )


def limits(settings: Settings) -> Limits:
    """The guard rails admission enforces (0: that one is off)."""
    return Limits(
        user_messages_per_hour=settings.threadgate_user_messages_per_hour,
        thread_messages_per_hour=settings.threadgate_thread_messages_per_hour,
        user_daily_tokens=settings.threadgate_user_daily_tokens,
        channel_daily_tokens=settings.threadgate_channel_daily_tokens,
        all_daily_tokens=settings.threadgate_daily_tokens_all_workspaces,
        channel_daily_spend_usd=settings.threadgate_channel_daily_spend_usd,
        workspace_daily_spend_usd=settings.threadgate_workspace_daily_spend_usd,
        notices=LIMIT_NOTICES,
        pictures=PictureBudgets(
            thread_bytes=settings.threadgate_thread_picture_bytes,
            workspace_daily_bytes=settings.threadgate_workspace_daily_picture_bytes,
        ),
    )


def alert_windows(settings: Settings, db: Database) -> AlertWindows:
    """One operator alert per kind of failure per window, for every replica on `db`; an
    alert still being sent after a few Slack call limits is taken over by another."""
    return AlertWindows(
        PostgresAlertThrottle(db),
        window_seconds=settings.threadgate_alert_window_seconds,
        send_seconds=4 * settings.threadgate_slack_timeout_seconds,
    )


def build_runner(
    settings: Settings,
    db: Database,
    models: list[Model],
    *,
    publisher: Publisher,
    alerts: AlertSink,
    thread_reader: ThreadReader | None = None,
    metrics: Metrics | None = None,
    live: LiveView | None = None,
    registries: tuple[ToolRegistry, SubtaskRegistry] | None = None,
    tool_observer: ToolObserver | None = None,
    desk: ApprovalDesk | None = None,
    policies: PolicyOf | None = None,
    circuit: CircuitBreaker | None = None,
    tracer: Tracer = NO_TRACER,
) -> TaskRunner:
    """The task runner on Postgres, answering through `models`, delivering to `publisher`;
    `registries` are the tools (MCP ones included) and subtask types it offers, `policies`
    each channel's boundary (their ladders share `circuit` with this one). With a `desk` to
    ask people at, tools that need approval are offered (agent/core/approval.py); without
    (the console), they are not."""
    tools, subtask_types = registries or default_registries()
    approvals = PostgresApprovals(db) if desk is not None else None
    ladder = AttemptLadder(
        models,
        policy=retry_policy(settings),
        circuit=circuit,
        on_attempt=metrics.on_attempt if metrics else None,
    )
    respond = ModelResponder(
        ladder,
        tools=tools,
        subtasks=subtask_types,
        thread_reader=thread_reader,
        tool_observer=tool_observer,
        meter=PostgresUsageMeter(db),
        max_model_requests=settings.threadgate_max_model_requests_per_task,
        live=live,
        memory=PostgresMemory(db),
        instructions=settings.threadgate_instructions,
        approvals=approvals,
        policies=policies,
        prices=settings.price_table(),
        prompt_caching=settings.threadgate_prompt_caching,
        end_user=end_user_of if settings.threadgate_send_user_id else None,
        refusals=PostgresAttachmentRefusals(db),
        settings=RoundSettings(
            max_output_tokens=settings.threadgate_max_output_tokens,
            tool_timeout_seconds=settings.threadgate_tool_timeout_seconds,
            tool_output_chars=settings.threadgate_tool_output_chars,
        ),
    )
    compaction = (
        Compaction(
            PostgresSummaries(db),
            respond.ask_text,
            epoch=respond.epoch_of,
            settings=CompactionSettings(
                max_chars=settings.threadgate_history_chars,
                keep_chars=settings.threadgate_history_chars // 2,
            ),
            observe=metrics.compacted if metrics else lambda outcome: None,
        )
        if settings.threadgate_compaction
        else None
    )
    lease = settings.threadgate_lease_seconds
    return TaskRunner(
        queue=PostgresTaskQueue(db, lease_seconds=lease),
        delegations=PostgresDelegations(db, lease_seconds=lease),
        history=PostgresHistory(db, max_pinned=settings.threadgate_pinned_max),
        publisher=publisher,
        alerts=alerts,
        respond=respond,
        settings=RunnerSettings(
            workers=settings.threadgate_workers,
            heartbeat_seconds=lease / 3,
            history_chars=settings.threadgate_history_chars,
            max_rounds=settings.threadgate_max_rounds,
            subtask_timeout_seconds=settings.threadgate_subtask_timeout_seconds,
            max_deferrals=settings.threadgate_max_deferrals,
            max_deferral_seconds=settings.threadgate_max_deferral_seconds,
            still_trying_seconds=settings.threadgate_models_down_notice_seconds,
            task_timeout_seconds=settings.threadgate_task_timeout_seconds,
            notices=FailureNotices(override=settings.threadgate_failure_notice),
            approval_timeout_seconds=settings.threadgate_approval_timeout_seconds,
        ),
        observer=metrics,
        live=live,
        memory=PostgresMemory(db),
        compaction=compaction,
        approvals=approvals,
        desk=desk,
        tracer=tracer,
    )


def start_tracer(settings: Settings, stack: AsyncExitStack) -> Tracer:
    """The process's tracer: OTLP export when an endpoint is configured (its spans flushed
    when `stack` closes), else the one that records nothing. The OpenTelemetry SDK is
    imported here, only then."""
    endpoint = settings.otlp_traces_endpoint
    if endpoint is None:
        return NO_TRACER
    from gateway.telemetry.tracing import otlp_tracer

    tracer = otlp_tracer(endpoint)
    stack.callback(tracer.shutdown)
    log.info("traces go to %s over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT)", endpoint)
    return tracer


def tool_spans(tracer: Tracer) -> ToolObserver | None:
    """The tool-call spans, when traces are recorded."""
    if tracer is NO_TRACER:
        return None
    from gateway.telemetry.tracing import OtelTracer, ToolSpans

    return ToolSpans(tracer) if isinstance(tracer, OtelTracer) else None


async def start_mcp(settings: Settings, tools: ToolRegistry, stack: AsyncExitStack) -> McpClients:
    """Connect the configured MCP servers, their tools going into `tools`; closed by `stack`.

    Waits for each server's first attempt (at most `MCP_STARTUP_SECONDS`); one that failed
    is logged and retried in the background, never a reason not to serve."""
    clients = McpClients(settings.mcp_config(), tools)
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


# `threadgate_event_loop_lag_seconds{loop}` by the role of the gateway on that loop.
_LOOP_NAMES = {"all": "all", "ingress": "ingress", "worker": "workers"}


@dataclass
class Gateway:
    """A running gateway; `start` it, then `stop` it (or use `async with`)."""

    settings: Settings
    metrics: Metrics = field(default_factory=Metrics)
    port: int | None = None
    metrics_port: int | None = None
    mcp: McpClients | None = None
    clients: SlackClients | None = None
    policies: ChannelPolicies | None = None
    _circuit: CircuitBreaker = field(default_factory=CircuitBreaker)
    _stack: AsyncExitStack = field(default_factory=AsyncExitStack)
    _socket: SocketModeConnection | None = None
    _downloads: FileDownloader | None = None  # files people attach (gateway/inbound/files.py)
    _reads_documents: bool = False  # some route reads PDFs: they are kept with their turns
    _decoders: Decoders | None = None  # and their decoder processes (gateway/inbound/decoders.py)
    _workers_started: bool = False
    tracer: Tracer = NO_TRACER
    # True for the ingress thread of a one-process gateway (gateway/process/ingress_thread.py):
    # the workers' gateway migrated the database before launching it, logged the role,
    # serves the metrics they share, watches its pool and samples the queue.
    embedded: bool = False
    # Connections for statements (admissions' apart); None: THREADGATE_DB_CONNECTIONS.
    pool_size: int | None = None
    _ingress: IngressThread | None = None  # role `all` with THREADGATE_INGRESS_THREAD

    async def start(self, host: str, port: int) -> None:
        s = self.settings
        s.require_serve()
        # A bad MCP or channel config stops start-up before anything is opened.
        s.mcp_config()
        s.channel_config()
        self.metrics.show_kinds(SECRET_KINDS)
        # First: a wrong THREADGATE_METRICS_ADDRESS stops start-up before anything is opened.
        await self._start_metrics()
        if not self.embedded:
            log.info(
                "threadgate role: %s (THREADGATE_ROLE or --role), event loop: %s"
                " (THREADGATE_EVENT_LOOP)%s",
                s.threadgate_role,
                loop_name(asyncio.get_running_loop()),
                ", ingress on a thread of its own (THREADGATE_INGRESS_THREAD)"
                if s.ingress_apart
                else "",
            )
        if s.ingress_apart:
            # This gateway runs the workers; `_start_ingress` the rest, on its own loop.
            self.settings = s = s.model_copy(update={"threadgate_role": "worker"})
            self._ingress = IngressThread(
                self.settings.model_copy(update={"threadgate_role": "ingress"}),
                lambda settings: Gateway(
                    settings,
                    metrics=self.metrics,
                    embedded=True,
                    pool_size=settings.ingress_thread_connections,
                ),
            )
        self.tracer = start_tracer(s, self._stack)
        circuit = self._circuit if s.runs_workers else None
        self.policies = channel_policies(s, self.metrics, circuit, self.tracer)
        self._stack.push_async_callback(self.policies.aclose)
        # An ingress calls no model: it opens none and needs no model settings.
        prices = s.price_table()
        models: list[Model] = (
            [
                MeteredModel(m, self.metrics, n, prices=prices, tracer=self.tracer)
                for n, m in enumerate(open_models(s))
            ]
            if s.runs_workers
            else []
        )
        for model in models:
            self._stack.push_async_callback(model.aclose)
        db = Database(
            await database_dsn(s),
            max_size=self.pool_size or s.threadgate_db_connections,
            # Acks never wait for a connection behind reply work (storage/database.py).
            admission_size=s.threadgate_admission_connections if s.serves_events else 0,
            on_pool_wait=self.metrics.db_pool_wait_seconds.observe,
            signals=s.runs_workers,  # an ingress takes no lease and wakes no worker
        )
        await db.open()
        self._stack.push_async_callback(db.close)
        if not self.embedded:
            self.metrics.watch_pool(db.pool)
            await db.migrate()  # the ingress thread's gateway starts once this is done
        if self._ingress is not None:
            # Launched now, awaited last: its start overlaps the workers'.
            self._ingress.launch(host, port)
            self._stack.push_async_callback(self._ingress.stop)
        webhook = s.threadgate_alert_webhook_url
        supervisor = Supervisor()
        self._stack.push_async_callback(supervisor.aclose)
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self._stack.push_async_callback(session.close)
        alarm = TokenAlarm(webhook.get_secret_value() if webhook else None, alert_windows(s, db))
        clients = SlackClientFactory(s, self.metrics, supervisor, session, alarm, self.tracer)
        if s.oauth_mode:
            self.clients = clients.many(db)
            identity = None
            await seal_stored_tokens(clients.installations(db))
            if not s.install_allowlist:
                log.warning("%s", OPEN_INSTALLS)
        else:
            client = clients.single()
            identity = await identify(client, s.require("SLACK_BOT_TOKEN"))
            self.clients = SlackClients.single(client)
        if s.runs_workers:
            registries = default_registries()
            book = PostgresScheduleBook(
                db, minimum_seconds=s.threadgate_schedule_min_period_seconds
            )
            for tool in schedule_tools(book):  # people's own schedules (issue 34)
                registries[0].register(tool)
            self.mcp = await start_mcp(s, registries[0], self._stack)
            self._start_runner(db, self.clients, models, identity, registries)
            self._start_retention(db)
            self._start_scheduler(db, self.clients)
        if not self.embedded:
            self._start_queue_sampler(db)
        self._start_lag_watch()
        if self._ingress is not None:
            self.port = (await self._ingress.started()).port
        elif s.serves_events:
            await self._start_http(db, clients, host, port, identity, supervisor)
        else:
            await self._start_health(db, host, port)

    async def stop(self) -> None:
        await self._stack.aclose()

    def reload(self) -> None:
        """Read THREADGATE_CHANNEL_CONFIG again and put it in force (SIGHUP); a file that
        became malformed keeps the policy in force (gateway/process/channel_policies.py)."""
        if self.settings.threadgate_channel_config is None:
            log.info("THREADGATE_CHANNEL_CONFIG is not set: there is no channel config to reload")
        elif self.policies is not None:
            self.policies.reload()
            if self._ingress is not None:
                self._ingress.reload()

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _start_metrics(self) -> None:
        address = self.settings.metrics_address
        if self.embedded:
            return
        if address is None:
            log.info("metrics are off (THREADGATE_METRICS_ADDRESS)")
            return
        host, port = address
        runner = web.AppRunner(build_metrics_app(self.metrics), access_log=None, logger=SERVER_LOG)
        await runner.setup()
        self._stack.push_async_callback(runner.cleanup)
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ConfigError(
                f"THREADGATE_METRICS_ADDRESS {self.settings.threadgate_metrics_address.strip()} "
                f"cannot be listened on ({reason}): put a free address of this host there, or off."
            ) from None
        self.metrics_port = runner.addresses[0][1]
        shown = f"[{host}]" if ":" in host else host
        log.info("metrics on http://%s:%d/metrics", shown, self.metrics_port)

    def _start_runner(
        self,
        db: Database,
        clients: SlackClients,
        models: list[Model],
        identity: AuthorizeResult | None,
        registries: tuple[ToolRegistry, SubtaskRegistry],
    ) -> None:
        s = self.settings
        assert self.mcp is not None  # started just before
        outbox = Outbox(
            db,
            call_seconds=s.threadgate_slack_timeout_seconds,
            settle_seconds=s.threadgate_slack_settle_seconds,
        )
        publisher = SlackPublisher(
            clients,
            outbox,
            # With many workspaces, each installation says who our bot is there.
            bot_user_id=identity.bot_user_id if identity else None,
            bot_id=identity.bot_id if identity else None,
            status_refresh_seconds=s.threadgate_status_refresh_seconds,
            status_delay_seconds=s.threadgate_status_delay_seconds,
            # Reads retried within a few call limits, then one outcome.
            reconcile_seconds=4 * s.threadgate_slack_timeout_seconds,
            streams=(
                StreamSettings(interval_seconds=s.threadgate_stream_interval_seconds)
                if s.threadgate_streaming
                else None
            ),
            on_stream_ended=self.metrics.stream_ended,
            tracer=self.tracer,
        )
        self._stack.push_async_callback(publisher.aclose)
        alerts = OperatorAlerts(
            clients.operator, s.threadgate_operator_channel, alert_windows(s, db)
        )
        runner = build_runner(
            self.settings,
            db,
            models,
            publisher=publisher,
            alerts=alerts,
            thread_reader=clients,
            metrics=self.metrics,
            live=publisher if publisher.streaming else None,
            registries=registries,
            tool_observer=tool_observer(
                db, self.metrics, self.mcp, shown=publisher, spans=tool_spans(self.tracer)
            ),
            desk=publisher,
            policies=self.policies.policy_of if self.policies else None,
            circuit=self._circuit,
            tracer=self.tracer,
        )
        runner.start()
        self._stack.push_async_callback(runner.stop)
        self._workers_started = True

    def _start_scheduler(self, db: Database, clients: SlackClients) -> None:
        """Each period of each schedule, one task (gateway/schedules/scheduler.py)."""
        s = self.settings
        alerts = OperatorAlerts(
            clients.operator, s.threadgate_operator_channel, alert_windows(s, db)
        )
        scheduler = Scheduler(
            db,
            clients,
            late_seconds=s.threadgate_schedule_late_seconds,
            observe=self.metrics.schedule_run_settled,
            tell_operators=functools.partial(tell_paused, alerts),
            limits=limits(s),
        )
        job = asyncio.create_task(scheduler.run(), name="scheduler")
        self._stack.push_async_callback(stop_task, job)

    def _start_lag_watch(self) -> None:
        """How late this gateway's loop runs (gateway/telemetry/loop_lag.py)."""
        loop = _LOOP_NAMES[self.settings.threadgate_role]
        watch = watch_lag(self.metrics.loop_lag.labels(loop))
        job = asyncio.create_task(watch, name=f"loop-lag-{loop}")
        self._stack.push_async_callback(stop_task, job)

    def _start_queue_sampler(self, db: Database) -> None:
        sampler = asyncio.create_task(sample_queue(db, self.metrics), name="queue-sampler")

        self._stack.push_async_callback(stop_task, sampler)

    def _start_retention(self, db: Database) -> None:
        s = self.settings
        retention = Retention(
            db, days=s.threadgate_retention_days, on_deleted=self.metrics.retention_deleted_rows
        )
        job = asyncio.create_task(
            retention.run_every(s.threadgate_retention_interval_seconds), name="retention"
        )
        self._stack.push_async_callback(stop_task, job)

    async def _start_http(
        self,
        db: Database,
        factory: SlackClientFactory,
        host: str,
        port: int,
        identity: AuthorizeResult | None,
        supervisor: Supervisor,
    ) -> None:
        s = self.settings
        secret = s.slack_signing_secret
        signing_secret = secret.get_secret_value() if secret else None
        policy = Policy(
            allowed_channels=s.allowed_channels,
            allowed_users=s.allowed_users,
            continue_threads=s.threadgate_continue_threads,
            backfill_messages=s.threadgate_backfill_messages,
            dm_threads_apart=not s.threadgate_agent_view,
        )
        clients, policies = self.clients, self.policies
        assert clients is not None and policies is not None  # set by start
        in_flight = InFlight()  # messages being admitted with downloads, process-wide

        async def gatekeeper(team_id: str | None, enterprise_id: str | None) -> Gatekeeper:
            # Names and back-fill read with the token of the event's workspace.
            workspace = await clients.workspace(team_id, enterprise_id)
            return Gatekeeper(
                GatekeeperSettings(
                    policy=policy,
                    lookup_budget_seconds=s.threadgate_lookup_budget_seconds,
                    limits=limits(s),
                    rules=policies.rules_of,
                ),
                GatekeeperPorts(
                    db=db,
                    users=workspace.users,
                    threads=workspace.threads,
                    files=self._file_reader(workspace.client),
                    sharing=workspace.sharing,
                    in_flight=in_flight,
                    tracer=self.tracer,
                    on_limited=self.metrics.message_limited,
                    on_redacted=lambda found: self.metrics.redacted(found.kinds),
                ),
            )

        async def pins(team_id: str | None, enterprise_id: str | None) -> Pins:
            workspace = await clients.workspace(team_id, enterprise_id)
            return Pins(
                db,
                workspace.users,
                max_pinned=s.threadgate_pinned_max,
                lookup_budget_seconds=s.threadgate_lookup_budget_seconds,
                client=workspace.client,
            )

        async def revisions(team_id: str | None, enterprise_id: str | None) -> Revisions:
            return Revisions(
                db,
                await gatekeeper(team_id, enterprise_id),
                lookup_budget_seconds=s.threadgate_lookup_budget_seconds,
            )

        installations = factory.installations(db)
        bolt = build_bolt_app(
            # With many workspaces bolt's client holds no token: bolt lends it each
            # event's; we call Slack through our own clients anyway.
            client=(await clients.for_team(None)) if identity else factory.tokenless(),
            signing_secret=signing_secret,
            gatekeeper=gatekeeper,
            metrics=self.metrics,
            identity=identity,
            pins=pins,
            revisions=revisions,
            authorize=InstalledIdentity(clients) if installations else None,
            on_uninstalled=Uninstaller(db, installations, clients) if installations else None,
            interactions=self._interactions(db, clients, supervisor),
            stops=Stops(db, clients),
            app_home=AppHome(
                clients,
                s.suggested_prompts if s.threadgate_agent_view else (),
                budget_seconds=s.threadgate_lookup_budget_seconds,
            ),
        )
        socket_mode = self.settings.socket_mode
        app = build_http_app(
            bolt=bolt,
            signing_secret=signing_secret,
            ready=self._readiness(db),
            metrics=self.metrics,
            events=not socket_mode,
            oauth=factory.oauth_flow(db, clients) if installations else None,
        )
        self.port = await self._listen(app, host, port)
        if socket_mode:
            await self._start_socket_mode(bolt)
        else:
            log.info("threadgate listening on http://%s:%d/slack/events", host, self.port)
        if installations:
            log.info("install threadgate at http://%s:%d%s", host, self.port, INSTALL_PATH)

    def _interactions(
        self, db: Database, clients: SlackClients, supervisor: Supervisor
    ) -> Interactions:
        """Clicks on approval and feedback buttons: stored, then shown (the decision on
        its request's message, updated from here: an ingress posts nothing else)."""
        s = self.settings
        outbox = Outbox(
            db,
            call_seconds=s.threadgate_slack_timeout_seconds,
            settle_seconds=s.threadgate_slack_settle_seconds,
        )
        return Interactions(
            db,
            clients,
            approvers=s.approvers,
            show=ApprovalMessages(clients, outbox).show,
            supervisor=supervisor,
            metrics=self.metrics,
        )

    async def _start_health(self, db: Database, host: str, port: int) -> None:
        """A worker's port: /healthz and /readyz only (ready: the database answers and the
        task workers run), so an orchestrator can probe it; no events route."""

        async def ready() -> bool:
            return self._workers_started and await db.is_ready()

        self.port = await self._listen(build_health_app(ready), host, port)
        log.info(
            "threadgate worker listening on http://%s:%d/readyz (health only: no events route)",
            host,
            self.port,
        )

    async def _listen(self, app: web.Application, host: str, port: int) -> int:
        """Serve `app` on host:port until the gateway stops; the port it got."""
        runner = web.AppRunner(app, access_log=None, logger=SERVER_LOG)
        await runner.setup()
        self._stack.push_async_callback(runner.cleanup)
        await web.TCPSite(runner, host, port).start()
        return int(runner.addresses[0][1])

    def _readiness(self, db: Database) -> Readiness:
        """Ready: the database answers with no migration pending and, in Socket Mode, the
        connection to Slack is up (not before it first is, not while it reconnects)."""

        async def ready() -> bool:
            if self.settings.socket_mode and (
                self._socket is None or not await self._socket.is_connected()
            ):
                return False
            return await db.is_ready()

        return ready

    def _file_reader(self, slack: AsyncWebClient) -> FileReader | None:
        """Reads message files with the workspace's client (`files.info`) and bot token
        through the process's one downloader (its own HTTP client) and decoder processes,
        both closed with the gateway; None without a token."""
        s = self.settings
        token = slack.token
        if token is None:
            return None
        if self._downloads is None or self._decoders is None:
            client = httpx.AsyncClient(timeout=s.threadgate_lookup_budget_seconds)
            self._stack.push_async_callback(client.aclose)
            self._downloads = FileDownloader(client, max_bytes=s.threadgate_file_max_bytes)
            self._reads_documents = reads_documents(s)  # once: the routes do not change
            self._decoders = Decoders(
                processes=s.threadgate_file_decoders,
                memory_bytes=s.threadgate_file_decode_memory_mb * 2**20,
            )
            self._stack.push_async_callback(self._decoders.close)
        return FileReader(
            self._downloads,
            self._decoders,
            token,
            s.file_kinds,
            on_read=self.metrics.file_read,
            info=FileInfo(slack),
            documents=self._reads_documents,
        )

    async def _start_socket_mode(self, bolt: AsyncApp) -> None:
        s = self.settings
        connection = await start_socket_mode(
            bolt,
            app_token=s.require("SLACK_APP_TOKEN"),
            api_url=s.slack_api_url,
            metrics=self.metrics,
            connect_timeout=s.threadgate_socket_connect_timeout,
        )
        self._socket = connection
        self._stack.push_async_callback(connection.close)
        log.info("threadgate connected in Socket Mode (health on port %d)", self.port)


@dataclass(frozen=True)
class SlackClientFactory:
    """How the gateway's Slack clients are made: one kind of client (SLACK_API_URL, the call
    time limit, metrics, the token alarm, one shared connection pool), for one workspace
    (SLACK_BOT_TOKEN) or for each installation (OAuth mode)."""

    settings: Settings
    metrics: Metrics
    supervisor: Supervisor
    session: aiohttp.ClientSession
    alarm: TokenAlarm
    tracer: Tracer = NO_TRACER

    def _client(self, token: str | None, **options: Any) -> MeteredWebClient:
        return slack_client(
            token,
            self.settings.slack_api_url,
            timeout=self.settings.threadgate_slack_timeout_seconds,
            metrics=self.metrics,
            supervisor=self.supervisor,
            session=self.session,
            tracer=self.tracer,
            **options,
        )

    def single(self) -> MeteredWebClient:
        return self._client(self.settings.require("SLACK_BOT_TOKEN"), on_token_refused=self.alarm)

    def tokenless(self) -> MeteredWebClient:
        """For bolt and the install flow: calls that bring their own token (or none)."""
        return self._client(None)

    def installations(self, db: Database) -> PostgresInstallations | None:
        s = self.settings
        if not s.oauth_mode:
            return None
        return PostgresInstallations(db, s.require("SLACK_CLIENT_ID"), cipher=token_cipher(s))

    def many(self, db: Database) -> SlackClients:
        installations = self.installations(db)
        assert installations is not None  # OAuth mode

        def for_installation(found: StoredInstallation) -> MeteredWebClient:
            name = label(found)
            on_refused = self.alarm.for_workspace(name)

            async def refused(method: str, error: str) -> None:
                # Dropped: a reinstall's new token is read at the next use.
                clients.forget(found.team_id, found.enterprise_id)
                await on_refused(method, error)

            return self._client(found.bot_token, on_token_refused=refused, workspace=name)

        clients = SlackClients(
            installations=installations,
            make_client=for_installation,
            operator_team=self.settings.threadgate_operator_team,
        )
        return clients

    def oauth_flow(self, db: Database, clients: SlackClients) -> AsyncOAuthFlow:
        s = self.settings
        installations = self.installations(db)
        assert installations is not None and s.slack_client_secret is not None
        return oauth_flow(
            client=self.tokenless(),
            client_id=s.require("SLACK_CLIENT_ID"),
            client_secret=s.slack_client_secret.get_secret_value(),
            redirect_uri=s.threadgate_oauth_redirect_url,
            installations=installations,
            states=PostgresOAuthStates(db, max_outstanding=s.threadgate_oauth_states_max),
            clients=clients,
            scopes=bot_scopes(continue_threads=s.threadgate_continue_threads),
            allowlist=InstallAllowlist(s.install_allowlist),
        )


async def seal_stored_tokens(installations: PostgresInstallations | None) -> None:
    """Seal the bot tokens stored before THREADGATE_TOKEN_KEY was set (every role, every
    start: safe beside other replicas doing the same, and nothing to do the next time)."""
    sealed = await installations.seal_stored() if installations is not None else 0
    if sealed:
        log.info("sealed %d stored bot token(s) with THREADGATE_TOKEN_KEY", sealed)


def token_cipher(settings: Settings) -> TokenCipher | None:
    """What seals the stored bot tokens (THREADGATE_TOKEN_KEY), if anything."""
    key = settings.threadgate_token_key
    return TokenCipher(key.get_secret_value()) if key is not None else None


async def identify(client: MeteredWebClient, token: str) -> AuthorizeResult:
    """Who we are in Slack (`auth.test`); a refused token, or a Slack that failed or
    could not be reached, stops start-up in one sentence."""
    try:
        response = await client.auth_test()
    except SlackRefused as refused:
        raise ConfigError(
            f"SLACK_BOT_TOKEN was refused by Slack ({refused.error}): put a valid bot token "
            "(xoxb-…) there."
        ) from None
    except SlackOutcomeUnknown as failure:
        raise ConfigError(
            f"Slack failed on auth.test at SLACK_API_URL ({failure.reason}); try again, or "
            "check the URL."
        ) from None
    except SlackError as failure:
        raise ConfigError(
            f"Slack could not be reached at SLACK_API_URL ({failure.reason}); check the network "
            "or the URL."
        ) from None
    return AuthorizeResult.from_auth_test_response(auth_test_response=response, bot_token=token)


async def sample_queue(db: Database, metrics: Metrics, every_seconds: float = 15.0) -> None:
    """Keep the queue depth, oldest-task age and today's token gauges fresh."""
    while True:
        with contextlib.suppress(Exception):
            row = await db.pool.fetchrow(
                "SELECT count(*) AS depth,"
                " coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS age"
                " FROM tasks WHERE state IN ('queued', 'running', 'waiting')"
            )
            if row is not None:
                metrics.queue_depth.set(row["depth"])
                metrics.oldest_task_seconds.set(row["age"])
            used_input, used_output = await tokens_today(db)
            metrics.tokens_today.labels("input").set(used_input)
            metrics.tokens_today.labels("output").set(used_output)
        await asyncio.sleep(every_seconds)


async def serve_forever(settings: Settings, host: str, port: int, stop: asyncio.Event) -> None:
    """Run until `stop` is set (by SIGTERM or SIGINT in the CLI)."""
    async with Gateway(settings) as gateway:
        await gateway.start(host, port)
        tune_garbage_collector()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, gateway.reload)  # THREADGATE_CHANNEL_CONFIG
        try:
            await stop.wait()
        finally:
            loop.remove_signal_handler(signal.SIGHUP)
        log.info("threadgate shutting down")


# The collector's thresholds while serving (`gc.set_threshold`; Python's are 700, 10, 10).
GC_THRESHOLDS = (10_000, 20, 10)


def tune_garbage_collector() -> None:
    """Freeze the heap start-up made, and collect the young generation less often.

    Everything imported and built at start-up (the libraries' modules, pydantic's schemas,
    bolt, the MCP SDK) lives as long as the process, yet every full collection walked all
    of it again, with the event loop stopped, and every event in flight waited that long.
    `gc.freeze` moves them where collections do not look; what is made later is collected
    as before.

    Frozen, full collections still came often under load. What filled the old generation
    was the work in flight: at Python's thresholds a reply's objects outlived two young
    collections, and moved to the old generation, long before the reply was done.
    Collecting the young generation every 10,000 objects, and the middle one every 20 of
    those, lets a reply's objects die young, so a full collection becomes rare. The price:
    garbage the reference counts do not free (cycles) waits longer, and the process holds
    more memory. BENCHMARKS.md has the measurements.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    gc.enable()  # off while the command loaded (gateway/operator/__main__.py)
