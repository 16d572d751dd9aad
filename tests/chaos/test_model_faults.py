"""Model faults: flaky 5xx and cut streams are retried until answered; a 401 is not retried.

The gateway runs as a real process against the fake OpenAI server. The per-request
timeout has no setting (agent/providers/provider.py: 60 s), so "timeouts" are played by
the failures a timeout turns into for the client: 504/408 answers and connections cut
mid-stream.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from agent.durable.notices import DEFAULT_NOTICES
from storage.database import Database
from tests.chaos.harness import (
    Processes,
    SentEvent,
    assert_exactly_once_in_order,
    conversations,
    converse,
    deliver_until_acked,
    marker_of,
    scaled,
    send_threads_in_order,
    wait_until_settled,
)
from tests.fakes.openai_api import (
    JSONReply,
    OpenAIServer,
    RawReply,
    RecordedRequest,
    Reply,
    StreamReply,
    error_reply,
)
from tests.fakes.slack_api import FakeSlack, Post
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database

ANY_NOTICE = {
    DEFAULT_NOTICES.text(kind, alerted=alerted)
    for kind in ("credential", "unavailable", "time_limit", "error")
    for alerted in (True, False)
}


def transient_fault(rng: random.Random) -> Reply:
    return rng.choice(
        [
            error_reply(500, "boom", "server_error"),
            JSONReply({"error": {"message": "overloaded"}}, status=503),
            RawReply("<html><body>502 Bad Gateway</body></html>", status=502),
            RawReply("<html><body>504 Gateway Time-out</body></html>", status=504),
            error_reply(408, "request timeout", "timeout"),
            StreamReply([b'data: {"id": "x", "choices": ['], cut=True),
        ]
    )


async def test_thirty_percent_transient_model_faults_still_answer_everything_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """With 30 % of model calls failing transiently (5xx, 408, cut streams) every message
    is still answered exactly once and in order."""
    dsn = await create_database(postgres_dsn, "chaos_model_flaky")
    rng = random.Random(30)
    faults: list[str] = []

    def flaky(seen: RecordedRequest) -> Reply:
        if rng.random() < 0.3:
            faults.append(marker_of(seen) or "?")
            return transient_fault(rng)
        return echo(seen)

    processes = Processes(tmp_path)
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = flaky
        env = gateway_env(slack, model, dsn)
        try:
            web = await processes.start(env)

            threads = conversations(scaled(4, 2), prefix="C0FLAKY")
            sent = await converse(http, slack, web, dsn, threads, scaled(6, 3))
        finally:
            await processes.stop_all()
    assert faults, "the seed should make some model calls fail"
    assert_exactly_once_in_order(slack, sent)
    assert not ANY_NOTICE & {p.text for p in slack.posts}


@pytest.mark.parametrize("operators", [True, False], ids=["operator-channel", "no-channel"])
async def test_rejected_model_key_is_not_retried_alerts_once_and_tells_every_user(
    postgres_dsn: str, tmp_path: Path, operators: bool
) -> None:
    """A 401 from the model: no retries, one operator alert per window, and every user
    gets a notice in their own thread. Without THREADGATE_OPERATOR_CHANNEL nobody can be
    alerted, and no notice claims anyone was: each asks the user to tell the operators."""
    dsn = await create_database(postgres_dsn, f"chaos_model_401_{operators}")
    notice = DEFAULT_NOTICES.credential if operators else DEFAULT_NOTICES.credential_unalerted
    processes = Processes(tmp_path)
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = lambda seen: error_reply(
            401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
        )
        env = gateway_env(slack, model, dsn)
        if not operators:
            del env["THREADGATE_OPERATOR_CHANNEL"]
        try:
            web = await processes.start(env)

            async def send(sent: SentEvent) -> None:
                await deliver_until_acked(http, lambda: web.events_url, sent)

            threads = conversations(scaled(8, 4), prefix="C0REFUSED")
            sent = await send_threads_in_order(threads, 1, send)
            await slack.wait_until(
                lambda: all(any(p.text == notice for p in in_thread(slack, s)) for s in sent),
                60,
                what="a notice in every thread",
            )
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
        finally:
            await processes.stop_all()
    per_event = Counter(marker_of(r) for r in model.requests)
    assert max(per_event.values()) == 1, f"a refused key was retried: {per_event}"
    for s in sent:
        assert [p.text for p in in_thread(slack, s)] == [notice]
    alerts = [p for p in slack.posts if p.channel == "COPS"]
    assert len(alerts) == (1 if operators else 0), slack.describe()
    assert all(re.search(r"OPENAI_API_KEY|provider", a.text) for a in alerts)
    if not operators:
        assert all("alerted" not in p.text for p in slack.posts)


def in_thread(slack: FakeSlack, sent: SentEvent) -> list[Post]:
    return [p for p in slack.posts if p.channel == sent.channel and p.thread_ts == sent.thread_ts]


async def test_two_replicas_refused_at_once_post_one_operator_alert(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Two replicas on one database, both refused by the model at the same time: the
    operator channel gets one alert for the whole deployment, and every user's notice
    says the operators were alerted (the replica that did not post learns it did)."""
    dsn = await create_database(postgres_dsn, "chaos_model_401_replicas")
    processes = Processes(tmp_path)
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = lambda seen: error_reply(
            401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
        )
        env = gateway_env(slack, model, dsn)
        try:
            replicas = [await processes.start(env), await processes.start(env)]
            threads = conversations(2 * scaled(4, 2), prefix="C0TWICE")
            sent = [thread.next_message() for thread in threads]
            # Half the messages to each replica, all at once.
            await asyncio.gather(
                *(
                    deliver_until_acked(http, lambda r=replicas[n % 2]: r.events_url, s)
                    for n, s in enumerate(sent)
                )
            )
            await slack.wait_until(
                lambda: all(in_thread(slack, s) for s in sent), 60, what="a notice in every thread"
            )
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
        finally:
            await processes.stop_all()
    alerts = [p for p in slack.posts if p.channel == "COPS"]
    assert len(alerts) == 1, slack.describe()
    for s in sent:
        assert [p.text for p in in_thread(slack, s)] == [DEFAULT_NOTICES.credential]
