"""The token alarm: once per window, to the webhook, and never saying the webhook's URL."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from gateway.delivery.alerts import TokenAlarm

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


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_a_webhook_answering_an_error_is_logged_without_its_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """HTTP 500 from the webhook: one error line with the status, no URL, nothing raised."""
    async with webhook(500) as (url, received):
        with caplog.at_level(logging.ERROR, logger="gateway.delivery.alerts"):
            await TokenAlarm(url)("chat.postMessage", "token_revoked")
    assert len(received) == 1 and "token_revoked" in received[0]
    assert "HTTP 500" in caplog.text and "THREADGATE_ALERT_WEBHOOK_URL" in caplog.text
    assert "alarmWebhookToken" not in caplog.text and "T0ALARM" not in caplog.text


async def test_an_unreachable_webhook_is_logged_without_its_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A webhook nobody answers: the exception's type is logged, never its URL-quoting text."""
    url = f"http://127.0.0.1:{closed_port()}{TOKEN_PATH}"
    with caplog.at_level(logging.ERROR, logger="gateway.delivery.alerts"):
        await TokenAlarm(url)("users.info", "invalid_auth")
    assert "could not reach THREADGATE_ALERT_WEBHOOK_URL (ClientConnectorError)" in caplog.text
    assert "alarmWebhookToken" not in caplog.text


async def test_one_alarm_per_error_per_window() -> None:
    """Within the window repeats are dropped; after it, the next refusal alarms again."""
    now = [0.0]
    async with webhook(200) as (url, received):
        alarm = TokenAlarm(url, window_seconds=60, clock=lambda: now[0])
        for at in (0.0, 30.0, 59.0, 61.0):
            now[0] = at
            await alarm("chat.postMessage", "token_revoked")
    assert len(received) == 2
