"""What on-call reads from a real `threadgate serve`: a refused message's line with its
reason and channel, an answered one's with its task, JSON lines timed in RFC 3339 UTC, and
a wrong signing secret told once, with its likely cause and no secret."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp

from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import DEFAULT_CHANNEL, app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, SECRET, echo, gateway_env
from tests.pg import create_database

ALLOWED = "C0ALLOWED01"
RFC_3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
# The app's signing secret as Slack has it, which the gateway was not given.
SLACKS_SECRET = "the-apps-real-signing-secret-0042"


def json_lines(gateway: GatewayProcess) -> list[dict[str, Any]]:
    text = gateway.log.decode(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


async def test_a_refused_and_an_answered_message_each_log_their_line_in_json(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A mention in a channel off THREADGATE_ALLOWED_CHANNELS logs one `refused` line with
    the reason and channel; one in the allowed channel logs `answered` with its task; every
    line is JSON timed in RFC 3339 UTC."""
    dsn = await create_database(postgres_dsn, "oncall_outcomes")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = echo
        env = gateway_env(slack, model, dsn) | {
            "THREADGATE_ALLOWED_CHANNELS": ALLOWED,
            "THREADGATE_LOG_FORMAT": "json",
        }
        gateway = GatewayProcess(env, tmp_path)
        await gateway.start()
        try:
            elsewhere = app_mention_event(text="<@UBOT> anyone here?")
            allowed = app_mention_event(text="<@UBOT> hello", channel=ALLOWED)
            for event in (elsewhere, allowed):
                status, _ = await deliver(http, gateway.events_url, event_callback(event), SECRET)
                assert status == 200
            await slack.wait_for_posts(1)
            await gateway.wait_for_log(rb'"outcome": "answered"')
        finally:
            await gateway.stop()
    lines = json_lines(gateway)
    [refused] = [line for line in lines if line.get("outcome") == "refused"]
    assert (refused["reason"], refused["channel"], refused["level"]) == (
        "channel_not_allowed",
        DEFAULT_CHANNEL,
        "INFO",
    )
    assert "THREADGATE_ALLOWED_CHANNELS" in refused["message"] and refused["event"]
    [answered] = [line for line in lines if line.get("outcome") == "answered"]
    assert answered["task"] == f"T1:{ALLOWED}:{allowed['ts']}" and answered["channel"] == ALLOWED
    assert lines and all(RFC_3339_UTC.fullmatch(line["time"]) for line in lines)
    assert {datetime.fromisoformat(line["time"]).utcoffset() for line in lines} == {timedelta(0)}


async def test_a_wrong_signing_secret_is_one_line_naming_it_and_no_secret(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Three events signed with another secret are one warning naming SLACK_SIGNING_SECRET
    as the likely cause; a request ten minutes old, one naming the clock; neither secret
    is in the log."""
    dsn = await create_database(postgres_dsn, "oncall_rejections")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        gateway = GatewayProcess(gateway_env(slack, model, dsn), tmp_path)
        await gateway.start()
        try:
            for n in range(3):
                envelope = event_callback(app_mention_event(text=f"<@UBOT> try {n}"))
                status, _ = await deliver(http, gateway.events_url, envelope, SLACKS_SECRET)
                assert status == 401
            stale = event_callback(app_mention_event(text="<@UBOT> late"))
            ten_minutes_ago = int(time.time()) - 600
            status, _ = await deliver(
                http, gateway.events_url, stale, SECRET, timestamp=ten_minutes_ago
            )
            assert status == 401
            # Lines are written in order: once the stale one is read, the others are too.
            await gateway.wait_for_log(rb"stale timestamp")
        finally:
            await gateway.stop()
    log = gateway.log.decode(errors="replace")
    signature = [line for line in log.splitlines() if "invalid signature" in line]
    assert len(signature) == 1 and " WARNING " in signature[0]
    assert "SLACK_SIGNING_SECRET is not this app's signing secret" in signature[0]
    assert "cause=signature" in signature[0] and "remote=127.0.0.1" in signature[0]
    [stale_line] = [line for line in log.splitlines() if "stale timestamp" in line]
    assert "this host's clock is ahead of the real time" in stale_line
    assert SECRET not in log and SLACKS_SECRET not in log
