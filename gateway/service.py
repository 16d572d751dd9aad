"""The composition root: storage, agent and Slack wired into one running gateway.

This is the only place that knows every part. It turns `Settings` into objects with
explicit arguments, starts them in dependency order (database, migrations, model slots,
workers, HTTP), and stops them in reverse.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from agent.ladder import AttemptLadder
from agent.model import Model
from agent.providers import ProviderSettings, open_model
from agent.responder import Responder
from agent.runner import RunnerSettings, TaskRunner
from gateway.alerts import OperatorAlerts
from gateway.config import Settings
from gateway.gatekeeper import Gatekeeper
from gateway.http import build_http_app
from gateway.metrics import Metrics
from gateway.publisher import SlackPublisher
from gateway.slack_app import build_bolt_app
from gateway.slack_client import slack_client
from gateway.users import UserDirectory
from storage.database import Database
from storage.embedded import start_embedded_postgres
from storage.history import PostgresHistory
from storage.outbox import Outbox
from storage.queue import PostgresTaskQueue

log = logging.getLogger(__name__)


async def database_dsn(settings: Settings) -> str:
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    return await start_embedded_postgres(settings.threadgate_data_dir)


def provider_settings(settings: Settings) -> ProviderSettings:
    return ProviderSettings(
        openai_api_key=settings.openai_api_key,
        openai_base_url=settings.openai_base_url,
        anthropic_api_key=settings.anthropic_api_key,
        anthropic_base_url=settings.anthropic_base_url,
        gateway_header=settings.threadgate_gateway_header,
        gateway_token=settings.threadgate_gateway_token,
    )


def open_models(settings: Settings) -> list[Model]:
    """The configured model slots; a bad spec or missing key is a ConfigError."""
    providers = provider_settings(settings)
    slots = [("THREADGATE_MODEL", settings.require("THREADGATE_MODEL"))]
    if settings.threadgate_fallback_model:
        slots.append(("THREADGATE_FALLBACK_MODEL", settings.threadgate_fallback_model))
    return [
        open_model(spec, slot=slot, settings=providers, variable=variable)
        for slot, (variable, spec) in enumerate(slots)
    ]


@dataclass
class Gateway:
    """A running gateway; `start` it, then `stop` it (or use `async with`)."""

    settings: Settings
    metrics: Metrics = field(default_factory=Metrics)
    port: int | None = None
    _stack: AsyncExitStack = field(default_factory=AsyncExitStack)

    async def start(self, host: str, port: int) -> None:
        s = self.settings
        s.require_serve()
        models = open_models(s)
        for model in models:
            self._stack.push_async_callback(model.aclose)
        db = Database(await database_dsn(s))
        await db.open()
        self._stack.push_async_callback(db.close)
        await db.migrate()
        client = slack_client(s.require("SLACK_BOT_TOKEN"), s.slack_api_url)
        self._start_runner(db, client, models)
        await self._start_http(db, client, host, port)

    async def stop(self) -> None:
        await self._stack.aclose()

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _start_runner(self, db: Database, client: AsyncWebClient, models: list[Model]) -> None:
        s = self.settings
        runner = TaskRunner(
            queue=PostgresTaskQueue(db, lease_seconds=s.threadgate_lease_seconds),
            history=PostgresHistory(db),
            publisher=SlackPublisher(client, Outbox(db)),
            alerts=OperatorAlerts(client, s.threadgate_operator_channel),
            respond=Responder(AttemptLadder(models)),
            settings=RunnerSettings(
                workers=s.threadgate_workers,
                heartbeat_seconds=s.threadgate_lease_seconds / 3,
                history_chars=s.threadgate_history_chars,
            ),
        )
        runner.start()
        self._stack.push_async_callback(runner.stop)

    async def _start_http(self, db: Database, client: AsyncWebClient, host: str, port: int) -> None:
        secret = self.settings.slack_signing_secret
        signing_secret = secret.get_secret_value() if secret else None
        gatekeeper = Gatekeeper(db, UserDirectory(client))
        bolt = build_bolt_app(
            client=client,
            signing_secret=signing_secret,
            gatekeeper=gatekeeper,
            metrics=self.metrics,
        )
        app = build_http_app(
            bolt=bolt, signing_secret=signing_secret, ready=db.is_ready, metrics=self.metrics
        )
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self._stack.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, host, port)
        await site.start()
        self.port = runner.addresses[0][1]
        log.info("threadgate listening on http://%s:%d/slack/events", host, self.port)


async def serve_forever(settings: Settings, host: str, port: int, stop: asyncio.Event) -> None:
    """Run until `stop` is set (by SIGTERM or SIGINT in the CLI)."""
    async with Gateway(settings) as gateway:
        await gateway.start(host, port)
        await stop.wait()
        log.info("threadgate shutting down")
