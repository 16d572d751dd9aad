"""The token alarm: once per window, to the webhook, and never saying the webhook's URL."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from gateway.delivery.alerts import AlertWindows, TokenAlarm
from storage import Database, PostgresAlertThrottle

TOKEN_PATH = "/services/T0ALARM/B0ALARM/alarmWebhookToken"


@contextlib.asynccontextmanager
async def webhook(status: int) -> AsyncIterator[tuple[str, list[str]]]:
    """A loopback webhook answering `status`; yields its URL and the texts it received."""
    received: list[str] = []

    async def hook(request: web.Request) -> web.Response:
        received.append((await request.json())["text"])
        return web.Response(status=status, text="nope" if status >= 400 else "ok")

    app = web.Application()
    app.router.add_post(TOKEN_PATH, hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}{TOKEN_PATH}", received
    finally:
        await runner.cleanup()


@pytest.fixture
async def db(fresh_dsn: str) -> AsyncIterator[Database]:
    """A database of this test's own: the alert windows it keeps start empty."""
    async with Database(fresh_dsn, min_size=1, max_size=2) as database:
        yield database


def windows(db: Database, window_seconds: float = 900.0) -> AlertWindows:
    return AlertWindows(PostgresAlertThrottle(db), window_seconds=window_seconds)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_a_webhook_answering_an_error_is_logged_without_its_url(
    caplog: pytest.LogCaptureFixture, db: Database
) -> None:
    """HTTP 500 from the webhook: one error line with the status, no URL, nothing raised."""
    async with webhook(500) as (url, received):
        with caplog.at_level(logging.ERROR, logger="gateway.delivery.alerts"):
            await TokenAlarm(url, windows(db))("chat.postMessage", "token_revoked")
    assert len(received) == 1 and "token_revoked" in received[0]
    assert "HTTP 500" in caplog.text and "THREADGATE_ALERT_WEBHOOK_URL" in caplog.text
    assert "alarmWebhookToken" not in caplog.text and "T0ALARM" not in caplog.text


async def test_an_unreachable_webhook_is_logged_without_its_url(
    caplog: pytest.LogCaptureFixture, db: Database
) -> None:
    """A webhook nobody answers: the exception's type is logged, never its URL-quoting text."""
    url = f"http://127.0.0.1:{closed_port()}{TOKEN_PATH}"
    with caplog.at_level(logging.ERROR, logger="gateway.delivery.alerts"):
        await TokenAlarm(url, windows(db))("users.info", "invalid_auth")
    assert "could not reach THREADGATE_ALERT_WEBHOOK_URL (ClientConnectorError)" in caplog.text
    assert "alarmWebhookToken" not in caplog.text


async def test_one_alarm_per_error_per_window_for_every_replica(db: Database) -> None:
    """Within the window repeats are dropped, from this process or another one (a second
    alarm on the same database); the next window's alarm says how many there were."""
    async with webhook(200) as (url, received):
        for alarm in (TokenAlarm(url, windows(db)), TokenAlarm(url, windows(db))):
            await alarm("chat.postMessage", "token_revoked")
            await alarm("chat.postMessage", "token_revoked")
        await TokenAlarm(url, windows(db, window_seconds=0))("users.info", "token_revoked")
    assert len(received) == 2
    assert "3 repeat(s) in the last window were not sent." in received[1]


async def test_an_alarm_the_webhook_refused_is_sent_again(db: Database) -> None:
    """A webhook answering 500 did not tell anyone: the next refusal alarms again."""
    async with webhook(500) as (url, received):
        alarm = TokenAlarm(url, windows(db))
        await alarm("chat.postMessage", "token_revoked")
        await alarm("chat.postMessage", "token_revoked")
    assert len(received) == 2
