"""Operator alerts: a refused credential or an exhausted quota, said once, loudly, usefully.

An alert names the credential that was refused (the AI gateway's token, the provider's
key, or — when the response did not say — both candidates), the route, when it was first
and last seen, and how many repeats were held back. One alert per failing credential per
window for the whole deployment: the window is kept in Postgres (`agent.AlertThrottle`,
storage/alert_windows.py), so of two replicas refused at the same moment one sends the
alert and the other counts a repeat — and tells its user the operators were alerted only
once the first says the alert went out. The repeats in between are counted, not posted.
The alert never carries a secret: it is built from the error's kind, source, status and
route.

How a model's 401 gets here: `agent.models.providers.classify` turns the status and body
into `CredentialRejected` with the authority that refused (`provider`, `gateway` or
`unknown`); the attempt ladder (`agent.models.ladder`) raises it at once, without retry or
fallback, and opens the route's circuit so later tasks fail fast; the task runner
(`agent.durable.runner`) tells the user in the thread and calls the `AlertSink` port,
which is `OperatorAlerts` below.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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
    AlertOutcome,
    AlertThrottle,
    AlertTurn,
    CredentialRejected,
    ModelError,
    QuotaExhausted,
    Task,
)
from gateway.slack.errors import SlackError

log = logging.getLogger(__name__)

# How often a repeat asks whether another replica's alert of its window went out.
POLL_SECONDS = 0.25

# With many workspaces, the operator channel's client is found when an alert is posted
# (gateway/slack/workspaces.py `SlackClients.operator`): None while nothing is installed.
OperatorClient = Callable[[], Awaitable[AsyncWebClient | None]]


@dataclass(frozen=True, slots=True)
class AlertWindows:
    """The throttle every alert of a deployment shares (storage's `PostgresAlertThrottle`),
    the window (`THREADGATE_ALERT_WINDOW_SECONDS`), and how long sending one alert may
    take before another replica takes its window over."""

    throttle: AlertThrottle
    window_seconds: float = 900.0
    send_seconds: float = 60.0

    async def note(self, key: str) -> AlertTurn | None:
        """Count a failure of the kind `key`; None when the throttle cannot be asked (the
        database is away): the alert is then sent, since twice is better than never."""
        try:
            return await self.throttle.note(
                key, window_seconds=self.window_seconds, send_seconds=self.send_seconds
            )
        except Exception:  # whatever went wrong, the operator must hear
            log.exception("operator alerts could not be throttled; sending this one")
            return None

    async def settle(self, turn: AlertTurn | None, outcome: AlertOutcome) -> None:
        if turn is None:
            return
        try:
            await self.throttle.settle(turn, outcome)
        except Exception:  # the window is taken over after send_seconds
            log.exception("the outcome of an operator alert could not be recorded")

    async def outcome(self, turn: AlertTurn) -> AlertOutcome | None:
        """How the alert of `turn`'s window went, waiting (at most `send_seconds`) while
        another replica sends it; None when that could not be learnt."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.send_seconds):
                # Another process sends it: nothing here is told when it is done.
                while (outcome := await self.throttle.outcome(turn)) is None:  # noqa: ASYNC110
                    await asyncio.sleep(POLL_SECONDS)
                return outcome
        return None


class OperatorAlerts:
    """`agent.AlertSink` posting to the operator channel, once per window for the whole
    deployment (`AlertWindows`)."""

    def __init__(
        self, client: AsyncWebClient | OperatorClient, channel: str | None, windows: AlertWindows
    ) -> None:
        self._client = client
        self._channel = channel
        self._windows = windows
        # This process's alerts being sent, by claim: its own repeats wait for them here.
        self._sending: dict[str, asyncio.Future[bool]] = {}

    async def credential_failure(self, task: Task, error: Exception) -> bool:
        turn = await self._windows.note(alert_key(error))
        if turn is not None and not turn.ours:
            return await self._told(turn)
        now = datetime.now(UTC)
        text = describe_failure(
            error,
            first_seen=turn.first_seen if turn else now,
            last_seen=turn.last_seen if turn else now,
            suppressed=turn.suppressed if turn else 0,
        )
        return await self._send(turn, text)

    async def notice(self, key: str, text: str, *, level: int = logging.CRITICAL) -> bool:
        """Any other alert for the operators (a schedule paused because it cannot run),
        once per window for its `key`, logged at `level`; True when it reached them, now
        or before."""
        turn = await self._windows.note(key)
        if turn is not None and not turn.ours:
            return await self._told(turn)
        return await self._send(turn, text, level)

    async def _told(self, turn: AlertTurn) -> bool:
        """Whether the alert of a repeat's window reached an operator (waiting for it)."""
        sending = self._sending.get(turn.claim)
        if sending is not None:
            return await asyncio.shield(sending)
        return await self._windows.outcome(turn) == "sent"

    async def _send(self, turn: AlertTurn | None, text: str, level: int = logging.CRITICAL) -> bool:
        sending: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        claim = turn.claim if turn else f"unthrottled:{id(sending)}"
        self._sending[claim] = sending
        outcome: AlertOutcome = "failed"
        try:
            outcome = await self._post(text, level)
        finally:
            # A failed post is tried again at the next failure rather than held back for
            # a window; with no channel at all, the window keeps the log quiet.
            await self._windows.settle(turn, outcome)
            sending.set_result(outcome == "sent")
            self._sending.pop(claim, None)
        return outcome == "sent"

    async def _post(self, text: str, level: int = logging.CRITICAL) -> AlertOutcome:
        """Log the alert, and post it to the operator channel."""
        log.log(level, "%s", text)
        if not self._channel:
            return "logged"
        client = self._client if isinstance(self._client, AsyncWebClient) else await self._client()
        if client is None:
            log.error("the operator alert was not posted: no workspace is installed yet")
            return "failed"
        try:
            await client.chat_postMessage(
                channel=self._channel, text=text, unfurl_links=False, parse="none", link_names=False
            )
        except SlackError as exc:
            log.error("the operator alert could not be posted to %s: %s", self._channel, exc)
            return "failed"
        return "sent"


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
    route = error.route if isinstance(error, ModelError) else None
    # A route with a key of its own (THREADGATE_ROUTES' apiKey) names that variable.
    key = (route.credential if route else "") or (
        vendor.key_variable if vendor else "the provider API key"
    )
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
    (`THREADGATE_ALERT_WEBHOOK_URL`, Slack-compatible `{"text": …}`), once per window for
    the whole deployment (`AlertWindows`, as for operator alerts).

    The webhook URL is a secret — Slack's and most others carry their token in the path —
    so a failed delivery is logged by status or exception type only: aiohttp's exceptions
    quote the URL in their message, and one of those reaching a log line (this alarm runs
    as a background task, whose failures are logged with their traceback) is the leak."""

    def __init__(self, webhook_url: str | None, windows: AlertWindows) -> None:
        self._url = webhook_url
        self._windows = windows

    def for_workspace(self, workspace: str) -> Callable[[str, str], Coroutine[Any, Any, None]]:
        """The alarm for one workspace's token (OAuth mode), naming it."""

        async def alarm(method: str, error: str) -> None:
            await self(method, error, workspace=workspace)

        return alarm

    async def __call__(self, method: str, error: str, *, workspace: str | None = None) -> None:
        if self._url is None:
            return
        turn = await self._windows.note(f"SlackTokenRefused:{workspace or ''}:{error}")
        if turn is not None and not turn.ours:
            return
        text = token_alarm_text(method, error, workspace, turn.suppressed if turn else 0)
        sent = await self._send(text)
        await self._windows.settle(turn, "sent" if sent else "failed")

    async def _send(self, text: str) -> bool:
        assert self._url is not None
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
            return False
        if status >= 400:
            log.error("THREADGATE_ALERT_WEBHOOK_URL answered the token alarm with HTTP %d", status)
            return False
        return True


def token_alarm_text(method: str, error: str, workspace: str | None, suppressed: int) -> str:
    text = (
        f":rotating_light: Slack refused threadgate's bot token ({error}, on {method}). "
        "No message can be answered until SLACK_BOT_TOKEN is fixed: reinstall the app or "
        "put a valid xoxb- token there."
        if workspace is None
        else f":rotating_light: Slack refused threadgate's bot token in workspace "
        f"{workspace} ({error}, on {method}). No message there can be answered until "
        "the app is installed there again."
    )
    if suppressed:
        text += f"\n{suppressed} repeat(s) in the last window were not sent."
    return text
