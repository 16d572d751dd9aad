"""Slack stores a post, then answers 5xx: the thread must still show it once.

A 5xx is as ambiguous as a lost response. slack_sdk's server-error handler would send the
post again blindly; threadgate's client sends no write twice, and the outbox settles the
post by looking in the thread (gateway/slack/client.py, gateway/delivery/posts.py).
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from gateway.slack.client import slack_client
from gateway.slack.errors import SlackOutcomeUnknown
from tests.chaos.harness import (
    Processes,
    assert_exactly_once_in_order,
    conversations,
    converse,
    scaled,
)
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database

# Slack shows a stored post at once here; the margin only paces the test.
FAST_SETTLE = {"THREADGATE_SLACK_SETTLE_SECONDS": "0.5"}


async def test_posts_slack_stored_then_answered_5xx_are_visible_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Every post lands and is answered 500 or 503 (the statuses slack_sdk re-sends):
    each reply is visible exactly once, found in the thread rather than posted again."""
    dsn = await create_database(postgres_dsn, "chaos_slack_5xx")
    processes = Processes(tmp_path)
    threads = conversations(scaled(6, 2), prefix="C0STORED5XX")
    per_thread = scaled(3, 2)
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = echo
        for n in range(len(threads) * per_thread):
            slack.fail_after_recording("chat.postMessage", status=500 if n % 2 else 503)
        try:
            web = await processes.start(gateway_env(slack, model, dsn) | FAST_SETTLE)
            sent = await converse(http, slack, web, dsn, threads, per_thread)
        finally:
            await processes.stop_all()
    assert_exactly_once_in_order(slack, sent)
    posts = slack.calls_to("chat.postMessage")
    assert len(posts) == len(sent), "a post Slack had stored was sent again"
    assert all(c.fault == "http_error_after_work" for c in posts)
    assert slack.calls_to("conversations.replies"), "the outbox never looked in the thread"


@pytest.mark.parametrize(
    "method",
    [
        "chat.postMessage",
        "chat.update",
        "chat.delete",
        "chat.startStream",
        "chat.appendStream",
        "chat.stopStream",
        "assistant.threads.setStatus",
    ],
)
async def test_the_client_sends_no_write_twice_after_a_5xx(method: str) -> None:
    """Whatever creates or changes something is sent once, whatever the 5xx, and its
    outcome is unknown."""
    async with FakeSlack(bot_token=BOT_TOKEN) as slack:
        client = slack_client(BOT_TOKEN, slack.url, timeout=10)
        slack.fail_after_recording(method, status=503)
        with pytest.raises(SlackOutcomeUnknown) as raised:
            await client.api_call(method, json={"channel": "C1", "ts": "1.0", "text": "x"})
        assert (raised.value.method, raised.value.reason) == (method, "HTTP 503")
        assert [c.fault for c in slack.calls_to(method)] == ["http_error_after_work"]


async def test_the_client_retries_a_read_after_a_5xx() -> None:
    """A read answered 500 or 503 is asked again, as slack_sdk would."""
    async with FakeSlack(bot_token=BOT_TOKEN) as slack:
        slack.seed_message("C1", "1700000000.000100", "U1", "hello")
        client = slack_client(BOT_TOKEN, slack.url, timeout=10)
        slack.fail("conversations.replies", status=500)
        slack.fail("conversations.replies", status=503)
        page = await client.conversations_replies(channel="C1", ts="1700000000.000100")
        assert [m["text"] for m in page["messages"]] == ["hello"]
        assert len(slack.calls_to("conversations.replies")) == 3
