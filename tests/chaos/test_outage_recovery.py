"""A thread never waits behind an outage (issue 49 item 3, issue 46 item 5).

Both model routes answer 503 with the deferral window long (the next planned try minutes
away). Each thread hears one "still trying" notice, however many messages it gets; the
log and the operator channel (THREADGATE_MODELS_DOWN_ALERT) say every route is down and
the route gauge shows 0. Then the models come back: a new message in the waiting thread
makes its waiting task try at once, its answer ends the outage, every other waiting task
(another thread's) is tried at once too, and the log and the operator channel say so.
Under `followup` (today's queue) the earlier messages are answered first, in order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from agent.durable.notices import DEFAULT_NOTICES
from storage.database import Database
from tests.chaos.harness import (
    Processes,
    SentEvent,
    assert_exactly_once_in_order,
    conversations,
    deliver_until_acked,
    replies_in,
    wait_until_settled,
)
from tests.fakes.openai_api import OpenAIServer, RecordedRequest, Reply, error_reply
from tests.fakes.slack_api import FakeSlack, Post
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database

OPERATORS = "COPS"
# Within this long of the models' return a new message is answered (the issue's bound);
# the planned tries of the window below are minutes apart.
ANSWERED_WITHIN = 30
# Every try asks each route once, the planned next try minutes away, the notice at once.
DOWN_FOR_LONG = {
    "THREADGATE_MODEL_ATTEMPTS": "1",
    "THREADGATE_MAX_DEFERRAL_SECONDS": "3000",
    "THREADGATE_MODELS_DOWN_NOTICE_SECONDS": "0",
}


def down(seen: RecordedRequest) -> Reply:
    return error_reply(503, "overloaded", "server_error")


def thread_posts(slack: FakeSlack, sent: SentEvent) -> list[Post]:
    return [p for p in slack.posts if (p.channel, p.thread_ts) == (sent.channel, sent.thread_ts)]


def alerts(slack: FakeSlack) -> list[str]:
    return [p.text for p in slack.posts if p.channel == OPERATORS]


async def wait_for_rows(db: Database, query: str, *args: object, deadline: float = 30) -> None:
    """Wait until `query` is true, looking again at each NOTIFY and twice a second."""
    async with asyncio.timeout(deadline):
        while not await db.pool.fetchval(query, *args):
            db.wakeup.clear()
            try:
                async with asyncio.timeout(0.5):
                    await db.wakeup.wait()
            except TimeoutError:
                pass


async def route_gauges(http: aiohttp.ClientSession, url: str | None) -> dict[str, float]:
    assert url is not None
    async with http.get(url) as response:
        page = await response.text()
    prefix = "threadgate_model_route_up{model="
    return {
        line[len(prefix) : line.index("}")].strip('"'): float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith(prefix)
    }


async def test_after_an_outage_a_new_message_is_answered_at_once_with_the_earlier_ones(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Every model down: one notice per thread (a second message adds none), a WARNING
    and an operator alert naming both routes, the gauges at 0. The models back, a new
    message in the thread is answered within 30 s after the earlier two, in order; the
    other thread's waiting message is answered too; the log and the operators hear the
    recovery."""
    dsn = await create_database(postgres_dsn, "chaos_outage_recovery")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = down
        env = (
            gateway_env(slack, model, dsn)
            | DOWN_FOR_LONG
            | {
                "THREADGATE_FALLBACK_MODEL": "openai:gpt-fallback",
                "THREADGATE_MODELS_DOWN_ALERT": "true",
                "THREADGATE_OPERATOR_CHANNEL": OPERATORS,
            }
        )
        processes = Processes(tmp_path)
        try:
            web = await processes.start(env)

            async def send(sent: SentEvent) -> None:
                await deliver_until_acked(http, lambda: web.events_url, sent)

            thread, other = conversations(2, prefix="C0OUTAGE")
            first, elsewhere = thread.next_message(), other.next_message()
            await send(first)
            await send(elsewhere)
            await slack.wait_until(
                lambda: (
                    bool(thread_posts(slack, first) and thread_posts(slack, elsewhere))
                    and len(alerts(slack)) == 1
                ),
                60,
                what="a notice in each thread and the operators' alert",
            )
            await web.wait_for_log(rb"WARNING.*every model route is unavailable: .*gpt-test")
            assert await route_gauges(http, web.metrics_url) == {
                "openai:gpt-test": 0.0,
                "openai:gpt-fallback": 0.0,
            }
            second = thread.next_message()
            async with Database(dsn, min_size=1, max_size=1) as db:
                await send(second)
                # The new message made the waiting task try again at once: still down.
                await wait_for_rows(
                    db,
                    "SELECT attempts = 2 AND state = 'queued' AND run_after > now()"
                    " FROM tasks WHERE id = $1",
                    first.task_id,
                )
                model.default = echo
                third = thread.next_message()
                await send(third)
                await slack.wait_until(
                    lambda: all(
                        any(s.marker in p.text for p in replies_in(slack, s.channel, s.thread_ts))
                        for s in (first, second, third, elsewhere)
                    ),
                    ANSWERED_WITHIN,
                    what="every message answered once the models are back",
                )
                await wait_until_settled(db)
            await slack.wait_until(lambda: len(alerts(slack)) == 2, 30, what="the recovery alert")
            await web.wait_for_log(rb"INFO.*the models are available again after \d+ s")
            await web.wait_for_log(rb"INFO.*1 task\(s\) waiting for the models are tried now")
            gauges = await route_gauges(http, web.metrics_url)
        finally:
            await processes.stop_all()
    assert_exactly_once_in_order(slack, [first, second, third, elsewhere])
    notices = [p.text for p in thread_posts(slack, first) if not p.text.startswith("re: ")]
    assert notices == [DEFAULT_NOTICES.still_trying], slack.describe()
    other_texts = [p.text for p in thread_posts(slack, elsewhere)]
    assert other_texts[0] == DEFAULT_NOTICES.still_trying and len(other_texts) == 2
    began, ended = alerts(slack)
    assert "Every model route is unavailable" in began and "gpt-fallback" in began
    assert "available again" in ended and "sk-test-key" not in began + ended
    assert gauges["openai:gpt-test"] == 1.0


async def test_under_collect_the_new_message_after_an_outage_is_answered_with_the_waiting_one(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """`THREADGATE_THREAD_QUEUE=collect` (the default): every model down, the thread hears
    one notice; the models back, a new message makes the waiting task try at once and its
    claim covers the new message, so one reply answers both, within 30 s, and the model's
    request carries both as turns."""
    dsn = await create_database(postgres_dsn, "chaos_outage_collect")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = down
        env = (
            gateway_env(slack, model, dsn) | DOWN_FOR_LONG | {"THREADGATE_THREAD_QUEUE": "collect"}
        )
        processes = Processes(tmp_path)
        try:
            web = await processes.start(env)
            (thread,) = conversations(1, prefix="C0COLLECT")
            first = thread.next_message()
            await deliver_until_acked(http, lambda: web.events_url, first)
            await slack.wait_until(
                lambda: bool(thread_posts(slack, first)), 60, what="the thread's notice"
            )
            model.default = echo
            second = thread.next_message()
            async with Database(dsn, min_size=1, max_size=1) as db:
                await deliver_until_acked(http, lambda: web.events_url, second)
                await slack.wait_until(
                    lambda: bool(replies_in(slack, first.channel, first.thread_ts)),
                    ANSWERED_WITHIN,
                    what="the reply once the models are back",
                )
                await wait_until_settled(db)
                row = await db.pool.fetchrow(
                    "SELECT state, covered_by FROM tasks WHERE id = $1", second.task_id
                )
        finally:
            await processes.stop_all()
    assert row is not None and (row["state"], row["covered_by"]) == ("covered", first.task_id)
    replies = replies_in(slack, first.channel, first.thread_ts)
    assert len(replies) == 1 and second.marker in replies[0].text, slack.describe()
    notices = [p.text for p in thread_posts(slack, first) if not p.text.startswith("re: ")]
    assert notices == [DEFAULT_NOTICES.still_trying], slack.describe()
    # The request that was answered is the last; it carries both messages as turns.
    turns = str(model.requests[-1].body)
    assert first.marker in turns and second.marker in turns
