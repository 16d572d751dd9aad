"""What every role opens first and closes last: the database, Slack, traces, the policy.

An ingress and the workers need the same few things — a database sized by the connection
plan (gateway/config/connections.py), the process's Slack clients, the tracer, the
compiled channel policy — and nothing else of each other. `open_resources` opens them in
order onto the caller's `AsyncExitStack`, so they close in reverse on every exit path;
the assemblies (gateway/process/ingress.py, gateway/process/workers.py) take the result
whole. The ingress thread of role `all` opens a set of its own on its own loop.

With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) set, the tracer exports over
OTLP (gateway/telemetry/tracing.py, imported only then); without, `agent.NO_TRACER`, and
no OpenTelemetry module is loaded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import aiohttp
from slack_bolt.authorization import AuthorizeResult

from agent import (
    NO_TRACER,
    CircuitBreaker,
    OutageTracker,
    Supervisor,
    ToolObserver,
    Tracer,
    stop_task,
)
from gateway.config.channel_config import ChannelConfig
from gateway.config.connections import Connections
from gateway.config.settings import Settings, database_dsn
from gateway.delivery.alerts import AlertWindows, OperatorAlerts, TokenAlarm
from gateway.process.channel_policies import ChannelPolicies, compile_policies
from gateway.process.slack_clients import SlackClientFactory, identify, seal_stored_tokens
from gateway.slack.oauth import OPEN_INSTALLS
from gateway.slack.read_pacing import ReadPacing
from gateway.slack.workspaces import SlackClients
from gateway.telemetry.metrics import Metrics
from storage import Database, Erasure, Outbox, PostgresAlertThrottle

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resources:
    """The opened parts an assembly is built from."""

    settings: Settings
    metrics: Metrics
    db: Database
    slack: SlackClientFactory  # makes clients: the install flow's, bolt's
    clients: SlackClients  # each workspace's client
    identity: AuthorizeResult | None  # who the bot is, with one workspace (else per install)
    supervisor: Supervisor  # background work started by callbacks, cancelled on stop
    tracer: Tracer
    policies: ChannelPolicies

    def outbox(self) -> Outbox:
        s = self.settings
        return Outbox(
            self.db,
            call_seconds=s.slack.timeout_seconds,
            settle_seconds=s.slack.settle_seconds,
        )

    def erasure(self) -> Erasure:
        """Deletes what was stored of a workspace the app left (storage/erasure.py)."""
        return Erasure(
            self.db,
            settle=timedelta(seconds=self.settings.database.erasure_delay_seconds),
            on_deleted=self.metrics.erased_rows,
        )

    def operator_alerts(self) -> OperatorAlerts:
        return OperatorAlerts(
            self.clients.operator,
            self.settings.alerts.operator_channel,
            alert_windows(self.settings, self.db),
        )


async def open_resources(
    settings: Settings,
    metrics: Metrics,
    stack: AsyncExitStack,
    *,
    connections: Connections,
    circuit: CircuitBreaker | None,
    migrate: bool,
    channels: ChannelConfig,
    outage: OutageTracker | None = None,
) -> Resources:
    """Open what an assembly needs, each closed by `stack`. With a `circuit` (workers) the
    channels' own models are opened; with `migrate` (the process's first database) the
    schema is brought up to date and the pool is watched. `channels` is the channel config
    the composition root read (once for every loop)."""
    tracer = start_tracer(settings, stack)
    policies = compile_policies(settings, channels, metrics, circuit, tracer, outage=outage)
    stack.push_async_callback(policies.aclose)
    db = await open_database(settings, metrics, stack, connections, migrate=migrate)
    supervisor = Supervisor()
    stack.push_async_callback(supervisor.aclose)
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    stack.push_async_callback(session.close)
    webhook = settings.alerts.webhook_url
    alarm = TokenAlarm(webhook.get_secret_value() if webhook else None, alert_windows(settings, db))
    slack = SlackClientFactory(settings, metrics, supervisor, session, alarm, tracer)
    clients, identity = await open_clients(slack, db, warn=migrate)
    return Resources(settings, metrics, db, slack, clients, identity, supervisor, tracer, policies)


async def open_database(
    settings: Settings,
    metrics: Metrics,
    stack: AsyncExitStack,
    connections: Connections,
    *,
    migrate: bool,
) -> Database:
    db = Database(
        await database_dsn(settings),
        max_size=connections.statements,
        # Acks never wait for a connection behind reply work (storage/database.py).
        admission_size=connections.admission,
        on_pool_wait=metrics.db_pool_wait_seconds.observe,
        signals=connections.signals,
    )
    await db.open()
    stack.push_async_callback(db.close)
    if migrate:
        metrics.watch_pool(db.pool)
        await db.migrate()
    return db


async def open_clients(
    slack: SlackClientFactory, db: Database, *, warn: bool = True
) -> tuple[SlackClients, AuthorizeResult | None]:
    """Each installation's client (OAuth mode, stored tokens sealed), or the one
    workspace's, after asking Slack who the bot is there. `warn`: this set of resources
    is the process's first (role all opens a second for its ingress thread), which warns
    of open installs once."""
    s = slack.settings
    pacing = read_pacing(s, db, slack.metrics)
    if s.slack.oauth_mode:
        await seal_stored_tokens(slack.installations(db))
        if warn and not s.slack.install_allowlist:
            log.warning("%s", OPEN_INSTALLS)
        return slack.many(db, pacing), None
    identity = await identify(slack.checking(), s.require("SLACK_BOT_TOKEN"))
    return SlackClients.single(slack.single(), pacing), identity


def read_pacing(settings: Settings, db: Database, metrics: Metrics) -> ReadPacing:
    """Slack's reads paced for every replica on `db` (gateway/slack/read_pacing.py)."""
    return ReadPacing(
        db,
        settings.slack.read_tier,
        on_read=metrics.slack_read,
        on_tier=metrics.read_tier_found,
    )


def alert_windows(settings: Settings, db: Database) -> AlertWindows:
    """One operator alert per kind of failure per window, for every replica on `db`; an
    alert still being sent after a few Slack call limits is taken over by another."""
    return AlertWindows(
        PostgresAlertThrottle(db),
        window_seconds=settings.alerts.window_seconds,
        send_seconds=4 * settings.slack.timeout_seconds,
    )


def start_tracer(settings: Settings, stack: AsyncExitStack) -> Tracer:
    """The process's tracer: OTLP export when an endpoint is configured (its spans flushed
    when `stack` closes), else the one that records nothing. The OpenTelemetry SDK is
    imported here, only then."""
    endpoint = settings.telemetry.traces_endpoint
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


def background(stack: AsyncExitStack, name: str, work: Coroutine[Any, Any, None]) -> None:
    """Run `work` as a task until `stack` closes (then cancelled and awaited)."""
    stack.push_async_callback(stop_task, asyncio.create_task(work, name=name))
