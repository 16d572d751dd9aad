"""Slack faults: chat.postMessage answers with 429 storms (Retry-After) and 5xx pages.

Every reply must still be posted exactly once, and after each 429 the gateway must wait
at least the Retry-After the fake imposed before asking again (a lower bound only).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

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

RETRY_AFTER = 1
# Each storm is three 429s in a row, each waited out (slack_sdk adds up to a second).
STORMS = scaled(4, 1)


async def test_rate_limit_storms_and_5xx_on_post_still_post_every_reply_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Under 429 storms with Retry-After and 5xx pages on chat.postMessage every reply is
    posted exactly once, in order, and no call follows a 429 before its Retry-After."""
    dsn = await create_database(postgres_dsn, "chaos_slack_faults")
    processes = Processes(tmp_path)
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = echo
        for _ in range(STORMS):
            slack.rate_limit("chat.postMessage", times=3, retry_after=RETRY_AFTER)
            slack.fail("chat.postMessage", status=500)
            slack.fail("chat.postMessage", status=503)
        # Slack shows a stored post at once here; the margin only paces the test (each
        # 5xx page is settled by looking in the thread once it passed).
        env = gateway_env(slack, model, dsn) | {"THREADGATE_SLACK_SETTLE_SECONDS": "0.5"}
        try:
            web = await processes.start(env)

            threads = conversations(scaled(4, 2), prefix="C0LIMITED")
            sent = await converse(http, slack, web, dsn, threads, scaled(4, 2))
        finally:
            await processes.stop_all()
    assert_exactly_once_in_order(slack, sent)
    posts = slack.calls_to("chat.postMessage")
    limited = [c for c in posts if c.fault == "ratelimited"]
    assert len(limited) == 3 * STORMS
    for call in limited:
        again = [c for c in posts if c.at > call.at and same_message(c.params, call.params)]
        assert again, f"a rate-limited post was never retried: {call.params.get('text')!r}"
        assert again[0].at - call.at >= RETRY_AFTER


def same_message(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """The same outbox row (its id rides in the message metadata)."""
    return a.get("metadata") == b.get("metadata")
