"""The composition root: `serve` assembled by role.

This is the only place that knows every part. `THREADGATE_ROLE` (or `serve --role`) picks
the assemblies a process runs, each started and stopped as a unit on one `AsyncExitStack`:

- `ingress` runs an `Ingress` (gateway/process/ingress.py): Slack's events are verified,
  admitted and acked; no model is opened.
- `worker` runs `Workers` (gateway/process/workers.py) behind a port with only /healthz
  and /readyz.
- `all` runs both: by default its ingress on a thread and event loop of its own with its own
  resources (THREADGATE_INGRESS_THREAD, gateway/process/ingress_thread.py), so that an ack
  never waits behind reply work; with that off, both on one loop and one database.

They meet in Postgres: admission queues a task, and any worker's lease claims it
(storage/queue.py), so any number of each can run against one database. What each opens
is `Resources` (gateway/process/resources.py), sized by the connection plan
(gateway/config/connections.py) that `doctor` reads too.

The channel policies (`THREADGATE_CHANNEL_CONFIG`, gateway/process/channel_policies.py)
are compiled before anything is opened, so a bad file stops `serve` first; SIGHUP reads the
file again (`Gateway.reload`), once, and hands that one reading to every loop (the ingress
thread's too), so the gatekeeper and the workers never enforce two readings of it; a
reload that fails keeps the policy in force everywhere and alerts the operator channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from agent import CircuitBreaker, ConfigError, OutageTracker, Supervisor
from gateway.config.channel_config import VARIABLE, ChannelConfig
from gateway.config.connections import ConnectionPlan
from gateway.config.settings import Settings
from gateway.delivery.alerts import OperatorAlerts
from gateway.process.channel_policies import ChannelPolicies
from gateway.process.event_loop import loop_name
from gateway.process.http import build_health_app, build_metrics_app, listen
from gateway.process.ingress import Ingress
from gateway.process.ingress_thread import IngressThread
from gateway.process.resources import Resources, background, open_resources
from gateway.process.workers import Workers
from gateway.telemetry.loop_lag import watch_lag
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.readiness import CachedReadiness
from gateway.text.secrets import KINDS as SECRET_KINDS
from storage import Database, tokens_today

log = logging.getLogger(__name__)

# The operator alert of a SIGHUP whose channel config could not be put in force.
RELOAD_KEY = "channel-config-reload"
RELOAD_FAILED = (
    "THREADGATE_CHANNEL_CONFIG was not reloaded: {error} Every channel keeps the policy in "
    "force until the file is fixed and the gateway gets SIGHUP again."
)


@dataclass
class Gateway:
    """A running gateway of the settings' role; `start` it, then `stop` it (or `async with`)."""

    settings: Settings
    metrics: Metrics = field(default_factory=Metrics)
    port: int | None = None
    metrics_port: int | None = None
    _stack: AsyncExitStack = field(default_factory=AsyncExitStack)
    _policies: ChannelPolicies | None = None
    _thread: IngressThread | None = None
    _alerts: OperatorAlerts | None = None
    _supervisor: Supervisor | None = None

    async def start(self, host: str, port: int) -> None:
        s = self.settings
        channels = check_serve(s)  # the channel config, read once for every loop
        self.metrics.show_kinds(SECRET_KINDS)
        # First: a wrong THREADGATE_METRICS_ADDRESS stops start-up before anything is opened.
        self.metrics_port = await start_metrics(self._stack, self.metrics, s)
        log_role(s)
        plan = ConnectionPlan.of(s)
        circuit = CircuitBreaker() if s.process.runs_workers else None
        outage = OutageTracker() if s.process.runs_workers else None  # shared like the circuit
        resources = await open_resources(
            s,
            self.metrics,
            self._stack,
            connections=plan.main,
            circuit=circuit,
            outage=outage,
            migrate=True,
            channels=channels,
        )
        self._policies = resources.policies
        self._alerts = resources.operator_alerts()
        self._supervisor = resources.supervisor
        if plan.ingress_thread is not None:
            # Launched once the database is migrated, awaited last: its start overlaps the
            # workers'.
            self._thread = IngressThread(s, self.metrics, plan.ingress_thread, channels)
            self._thread.launch(host, port)
            self._stack.push_async_callback(self._thread.stop)
        workers = Workers(resources, circuit, outage) if circuit is not None else None
        if workers is not None:
            await workers.start(self._stack)
        background(self._stack, "queue-sampler", sample_queue(resources.db, self.metrics))
        loop = _loop_of(s)
        background(self._stack, f"loop-lag-{loop}", watch_lag(self.metrics.loop_lag.labels(loop)))
        self.port = await self._listen(resources, workers, host, port)

    async def stop(self) -> None:
        await self._stack.aclose()

    def reload(self) -> None:
        """Read THREADGATE_CHANNEL_CONFIG again, once, and put that one reading in force on
        every loop (SIGHUP): the workers' here, the ingress thread's on its own. A file that
        became unreadable or malformed keeps the policy in force everywhere, and the
        operators are told (once per alert window), not only the log."""
        if self.settings.access.channel_file is None:
            log.info("THREADGATE_CHANNEL_CONFIG is not set: there is no channel config to reload")
            return
        if self._policies is None:
            return
        try:
            channels = self.settings.access.channel_config()
            self._policies.put(channels)
        except ConfigError as exc:
            self._reload_failed(exc)
            return
        if self._thread is not None:
            self._thread.reload(channels)
        self.metrics.channel_reloads.labels("reloaded").inc()
        log.info("%s reloaded: %d channel(s) configured", VARIABLE, len(channels.channels))

    @property
    def channel_policies(self) -> list[ChannelPolicies]:
        """The channel policies of each loop (the workers', the ingress thread's)."""
        loops = [self._policies, self._thread.policies if self._thread else None]
        return [policies for policies in loops if policies is not None]

    def _reload_failed(self, error: ConfigError) -> None:
        self.metrics.channel_reloads.labels("failed").inc()
        log.error("%s was not reloaded, the channel policy in force is kept: %s", VARIABLE, error)
        if self._alerts is not None and self._supervisor is not None:
            text = RELOAD_FAILED.format(error=error)
            self._supervisor.spawn(self._alerts.notice(RELOAD_KEY, text), name=RELOAD_KEY)

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _listen(
        self, resources: Resources, workers: Workers | None, host: str, port: int
    ) -> int:
        if self._thread is not None:
            return await self._thread.started()
        if self.settings.process.serves_events:
            return await Ingress(resources).start(self._stack, host, port)
        assert workers is not None  # role worker
        return await start_health(self._stack, resources.db, workers, host, port)


def check_serve(settings: Settings) -> ChannelConfig:
    """What `serve` needs is set and well formed, before anything is opened: a bad MCP or
    channel config stops start-up here. The channel config, read once for every loop."""
    settings.require_serve()
    settings.tools.mcp_config()
    return settings.access.channel_config()


def log_role(s: Settings) -> None:
    log.info(
        "threadgate role: %s (THREADGATE_ROLE or --role), event loop: %s (THREADGATE_EVENT_LOOP)%s",
        s.process.role,
        loop_name(asyncio.get_running_loop()),
        ", ingress on a thread of its own (THREADGATE_INGRESS_THREAD)"
        if s.process.ingress_apart
        else "",
    )


def _loop_of(settings: Settings) -> str:
    """`threadgate_event_loop_lag_seconds{loop}` of the main loop: `workers` when the
    ingress is on a thread of its own (its loop is `ingress`)."""
    if settings.process.ingress_apart or settings.process.role == "worker":
        return "workers"
    return settings.process.role


async def start_metrics(stack: AsyncExitStack, metrics: Metrics, settings: Settings) -> int | None:
    """/metrics on THREADGATE_METRICS_ADDRESS, a listener of its own; its port, or None
    when off."""
    address = settings.telemetry.metrics_listen
    if address is None:
        log.info("metrics are off (THREADGATE_METRICS_ADDRESS)")
        return None
    host, port = address
    try:
        bound = await listen(stack, build_metrics_app(metrics), host, port)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"THREADGATE_METRICS_ADDRESS {settings.telemetry.metrics_address.strip()} "
            f"cannot be listened on ({reason}): put a free address of this host there, or off."
        ) from None
    shown = f"[{host}]" if ":" in host else host
    log.info("metrics on http://%s:%d/metrics", shown, bound)
    return bound


async def start_health(
    stack: AsyncExitStack, db: Database, workers: Workers, host: str, port: int
) -> int:
    """A worker's port: /healthz and /readyz only (ready: the database answers and the
    task workers run; the database asked at most once a second), so an orchestrator can
    probe it; no events route."""

    database_ready = CachedReadiness(db.is_ready)

    async def ready() -> bool:
        return workers.started and await database_ready()

    bound = await listen(stack, build_health_app(ready), host, port)
    log.info(
        "threadgate worker listening on http://%s:%d/readyz (health only: no events route)",
        host,
        bound,
    )
    return bound


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
