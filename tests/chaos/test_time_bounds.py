"""Waits that used to never end (issue 9, items 4 and 6): a model stream kept open with
keep-alive comments, a task that outlives its time, and look-ups that delay the ack.

Real gateway processes, real Postgres, the loopback fakes. The ack scenario holds Slack's
`users.info` and `conversations.replies` forever and delivers events the way Slack does:
an event not acked within 3 seconds is delivered again. That 3 s is Slack's contract,
which the gateway must meet; the gateway's own budget (1 s here) sits well inside it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import aiohttp

from agent.durable.notices import DEFAULT_NOTICES
from storage.database import Database
from tests.chaos.harness import (
    Conversation,
    Processes,
    SentEvent,
    assert_exactly_once_in_order,
    conversations,
    converse,
    deliver_until_acked,
    marker_of,
    replies_in,
    scaled,
    wait_until_settled,
)
from tests.fakes.openai_api import KeepAliveForever, OpenAIServer, RecordedRequest, Reply
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import deliver, new_ts
from tests.gateway.rig import BOT_TOKEN, SECRET, echo, gateway_env
from tests.pg import create_database

SLACK_ACK_SECONDS = 3  # Slack redelivers an event that was not acked within this


async def test_a_stream_kept_alive_forever_ends_at_the_deadline_and_the_fallback_answers(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The primary model opens its stream and sends only keep-alive comments (as OpenRouter
    does while a reasoning model thinks). THREADGATE_MODEL_TIMEOUT_SECONDS is a wall-clock
    deadline, so the request ends, and the fallback answers every message once."""
    dsn = await create_database(postgres_dsn, "chaos_keepalive")

    def primary_stalls(seen: RecordedRequest) -> Reply:
        return KeepAliveForever(0.2) if seen.body["model"] == "gpt-test" else echo(seen)

    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = primary_stalls
        env = gateway_env(slack, model, dsn) | {
            "THREADGATE_FALLBACK_MODEL": "openai:gpt-fallback",
            "THREADGATE_MODEL_TIMEOUT_SECONDS": "2",
            "THREADGATE_MODEL_ATTEMPTS": "1",
        }
        processes = Processes(tmp_path)
        try:
            web = await processes.start(env)
            threads = conversations(scaled(4, 2), prefix="C0KEEPALIVE")
            sent = await converse(http, slack, web, dsn, threads, scaled(2, 1))
        finally:
            await processes.stop_all()
    assert_exactly_once_in_order(slack, sent)
    asked = Counter((marker_of(r), r.body["model"]) for r in model.requests)
    assert {asked[(s.marker, "gpt-test")] for s in sent} == {1}
    assert {asked[(s.marker, "gpt-fallback")] for s in sent} == {1}


async def test_a_task_past_its_time_limit_ends_with_one_notice(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A model that never finishes within THREADGATE_TASK_TIMEOUT_SECONDS: each thread gets
    the time-limit notice once, and its next message is answered when the model is back."""
    dsn = await create_database(postgres_dsn, "chaos_task_limit")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = lambda seen: KeepAliveForever(0.2)
        env = gateway_env(slack, model, dsn) | {"THREADGATE_TASK_TIMEOUT_SECONDS": "3"}
        processes = Processes(tmp_path)
        try:
            web = await processes.start(env)
            threads = conversations(scaled(3, 2), prefix="C0LIMIT")
            first = [thread.next_message() for thread in threads]
            for sent in first:
                await deliver_until_acked(http, lambda: web.events_url, sent)
            await slack.wait_until(lambda: len(slack.posts) >= len(first), 60, what="notices")
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
            model.default = echo
            second = [thread.next_message() for thread in threads]
            for sent in second:
                await deliver_until_acked(http, lambda: web.events_url, sent)
            await slack.wait_until(
                lambda: all(replies_in(slack, s.channel, s.thread_ts) for s in second), 60
            )
        finally:
            await processes.stop_all()
    for one, two in zip(first, second, strict=True):
        texts = [
            p.text for p in slack.posts if (p.channel, p.thread_ts) == (one.channel, one.thread_ts)
        ]
        assert texts[0] == DEFAULT_NOTICES.time_limit, slack.describe()
        assert len(texts) == 2 and two.marker in texts[1]


async def test_lookups_that_never_answer_do_not_delay_the_ack_past_slack_s_retry(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A first mention inside an existing thread needs the thread (back-fill) and people's
    names before the ack. With both Slack calls hanging, every event is still acked at its
    first delivery (within Slack's 3 s) and answered once, with ids standing in for names."""
    dsn = await create_database(postgres_dsn, "chaos_ack_budget")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SLACK_ACK_SECONDS)) as http,
    ):
        model.default = echo
        threads: list[Conversation] = []
        for thread in conversations(scaled(6, 3), prefix="C0SLOW"):
            root = new_ts()
            slack.seed_message(thread.channel, root, "U0PERSON01", "an earlier message")
            thread.root = root
            threads.append(thread)
        held = [slack.hold("users.info"), slack.hold("conversations.replies")]
        env = gateway_env(slack, model, dsn) | {"THREADGATE_LOOKUP_BUDGET_SECONDS": "1"}
        processes = Processes(tmp_path)
        try:
            web = await processes.start(env)
            sent: list[SentEvent] = [thread.next_message() for thread in threads]
            statuses = await asyncio.gather(
                *(_first_delivery(http, web.events_url, s) for s in sent)
            )
            await slack.wait_until(
                lambda: all(replies_in(slack, s.channel, s.thread_ts) for s in sent), 60
            )
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
        finally:
            for gate in held:
                gate.set()
            await processes.stop_all()
    assert statuses == [200] * len(sent), f"acks not within Slack's {SLACK_ACK_SECONDS} s"
    assert_exactly_once_in_order(slack, sent)
    assert slack.calls_to("users.info") and slack.calls_to("conversations.replies")


async def _first_delivery(http: aiohttp.ClientSession, url: str, sent: SentEvent) -> int:
    """The status of one delivery, or 0 when Slack's ack time ran out first."""
    try:
        status, _ = await deliver(http, url, sent.envelope, SECRET)
    except TimeoutError:
        # Slack would deliver again; the scenario counts it as a failure, but the task
        # still has to be answered (once) for the run to end cleanly.
        await deliver_until_acked(http, lambda: url, sent)
        return 0
    sent.attempts, sent.acked = 1, 200 <= status < 300
    return status
