"""Operator alerts: a refused credential or an exhausted quota, said once, loudly, usefully.

An alert names the credential that was refused (the AI gateway's token, the provider's
key, or — when the response did not say — both candidates), the route, when it was first
and last seen, and how many repeats were held back. One alert per failing credential per
window; the repeats in between are counted, not posted. The alert never carries a secret:
it is built from the error's kind, source, status and route.

How a model's 401 gets here: `agent.models.providers.classify` turns the status and body
into `CredentialRejected` with the authority that refused (`provider`, `gateway` or
`unknown`); the attempt ladder (`agent.models.ladder`) raises it at once, without retry or
fallback, and opens the route's circuit so later tasks fail fast; the task runner
(`agent.durable.runner`) tells the user in the thread and calls the `AlertSink` port,
which is `OperatorAlerts` below.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from agent import (
    GATEWAY_HEADER_VARIABLE,
    GATEWAY_TOKEN_VARIABLE,
    VENDORS,
    CredentialRejected,
    ModelError,
    QuotaExhausted,
    Task,
)
from gateway.slack.errors import SlackError

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Window:
    first_seen: datetime
    last_seen: datetime
    posted_at: float
    # The window's one alert: failures that arrive while it is being posted wait for it,
    # so none of them posts again, and each knows whether an operator was really told.
    delivery: asyncio.Future[bool]
    suppressed: int = 0


# With many workspaces, the operator channel's client is found when an alert is posted
# (gateway/slack/workspaces.py `SlackClients.operator`): None while nothing is installed.
OperatorClient = Callable[[], Awaitable[AsyncWebClient | None]]


class OperatorAlerts:
    """`agent.AlertSink` posting to the operator channel."""

    def __init__(
        self,
        client: AsyncWebClient | OperatorClient,
        channel: str | None,
        *,
        window_seconds: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._channel = channel
        self._window = window_seconds
        self._clock = clock
        self._seen: dict[str, _Window] = {}

    async def credential_failure(self, task: Task, error: Exception) -> bool:
        key = alert_key(error)
        now, wall = self._clock(), datetime.now(UTC)
        window = self._seen.get(key)
        if window is not None and now - window.posted_at < self._window:
            window.suppressed += 1
            window.last_seen = wall
            return await asyncio.shield(window.delivery)
        suppressed = window.suppressed if window else 0
        first = window.first_seen if window else wall
        delivery: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._seen[key] = _Window(first, wall, now, delivery)
        text = describe_failure(error, first_seen=first, last_seen=wall, suppressed=suppressed)
        delivered = False
        try:
            delivered = await self._post(text)
        finally:
            delivery.set_result(delivered)
            # A post that failed is tried again at the next failure rather than held back
            # for a window; with no channel at all, the window keeps the log quiet.
            if not delivered and self._channel:
                self._seen.pop(key, None)
        return delivered

    async def _post(self, text: str) -> bool:
        """Log the alert, and post it to the operator channel; True when it was posted."""
        log.critical("%s", text)
        if not self._channel:
            return False
        client = self._client if isinstance(self._client, AsyncWebClient) else await self._client()
        if client is None:
            log.error("the operator alert was not posted: no workspace is installed yet")
            return False
        try:
            await client.chat_postMessage(
                channel=self._channel, text=text, unfurl_links=False, parse="none", link_names=False
            )
        except SlackError as exc:
            log.error("the operator alert could not be posted to %s: %s", self._channel, exc)
            return False
        return True


def alert_key(error: Exception) -> str:
    route = getattr(error, "route", None)
    where = f"{route.provider}:{route.model}" if route else "unknown route"
    source = error.source if isinstance(error, CredentialRejected) else "quota"
    return f"{type(error).__name__}:{source}:{where}"


def describe_failure(
    error: Exception, *, first_seen: datetime, last_seen: datetime, suppressed: int
) -> str:
    route = error.route if isinstance(error, ModelError) else None
    provider = route.provider if route else "the provider"
    lines = [f":rotating_light: *{headline(error, provider)}*", what_to_check(error, provider)]
    if route is not None:
        lines.append(f"Route: `{route.provider}:{route.model}` (slot {route.slot})")
    status = error.status_code if isinstance(error, ModelError) else None
    if status is not None:
        lines.append(f"HTTP status: {status}")
    lines.append(
        f"First seen: {first_seen:%Y-%m-%d %H:%M:%S} UTC; last seen: {last_seen:%Y-%m-%d %H:%M:%S} UTC"
    )
    if suppressed:
        lines.append(f"{suppressed} repeat(s) in the last window were not posted.")
    return "\n".join(lines)


def headline(error: Exception, provider: str) -> str:
    if isinstance(error, QuotaExhausted):
        return f"The {provider} account has run out of quota; tasks on this route are failing."
    if isinstance(error, CredentialRejected) and error.source == "gateway":
        return "The AI gateway refused our gateway token; tasks on this route are failing."
    if isinstance(error, CredentialRejected) and error.source == "provider":
        return f"{provider} refused our API key; tasks on this route are failing."
    return "A credential on the path to the model was refused; tasks on this route are failing."


def what_to_check(error: Exception, provider: str) -> str:
    vendor = VENDORS.get(provider)
    key = vendor.key_variable if vendor else "the provider API key"
    gateway = f"{GATEWAY_TOKEN_VARIABLE} (and {GATEWAY_HEADER_VARIABLE})"
    if isinstance(error, QuotaExhausted):
        return f"Check the billing and limits of the account behind {key}."
    if isinstance(error, CredentialRejected) and error.source == "gateway":
        return f"Check {gateway} against the gateway's settings."
    if isinstance(error, CredentialRejected) and error.source == "provider":
        return f"Check {key}: it may be revoked, expired or lack access to this model."
    return (
        f"The response did not say who refused it. Check both {GATEWAY_TOKEN_VARIABLE} "
        f"(if an AI gateway is in front) and {key}."
    )


class TokenAlarm:
    """When Slack refuses our own token, the operator channel is unreachable too: say it
    on the log at CRITICAL (the client does) and, if configured, to an outside webhook
    (`THREADGATE_ALERT_WEBHOOK_URL`, Slack-compatible `{"text": …}`), once per window
    (`THREADGATE_ALERT_WINDOW_SECONDS`, as for operator alerts).

    The webhook URL is a secret — Slack's and most others carry their token in the path —
    so a failed delivery is logged by status or exception type only: aiohttp's exceptions
    quote the URL in their message, and one of those reaching a log line (this alarm runs
    as a background task, whose failures are logged with their traceback) is the leak."""

    def __init__(
        self,
        webhook_url: str | None,
        *,
        window_seconds: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = webhook_url
        self._window = window_seconds
        self._clock = clock
        self._last: dict[str, float] = {}

    def for_workspace(self, workspace: str) -> Callable[[str, str], Coroutine[Any, Any, None]]:
        """The alarm for one workspace's token (OAuth mode), naming it."""

        async def alarm(method: str, error: str) -> None:
            await self(method, error, workspace=workspace)

        return alarm

    async def __call__(self, method: str, error: str, *, workspace: str | None = None) -> None:
        now = self._clock()
        key = f"{workspace}:{error}"
        if self._url is None or now - self._last.get(key, -self._window) < self._window:
            return
        self._last[key] = now  # before sending: concurrent refusals must not all send
        text = (
            f":rotating_light: Slack refused threadgate's bot token ({error}, on {method}). "
            "No message can be answered until SLACK_BOT_TOKEN is fixed: reinstall the app or "
            "put a valid xoxb- token there."
            if workspace is None
            else f":rotating_light: Slack refused threadgate's bot token in workspace "
            f"{workspace} ({error}, on {method}). No message there can be answered until "
            "the app is installed there again."
        )
        timeout = aiohttp.ClientTimeout(total=10)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(self._url, json={"text": text}) as response,
            ):
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            log.error(
                "the token alarm could not reach THREADGATE_ALERT_WEBHOOK_URL (%s)",
                type(exc).__name__,
            )
            return
        if status >= 400:
            log.error("THREADGATE_ALERT_WEBHOOK_URL answered the token alarm with HTTP %d", status)
