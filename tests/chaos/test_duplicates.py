"""Duplicates: every event arrives three times, over HTTP and Socket Mode at once.

Two real gateway processes share one database: one serves HTTP, the other holds a Socket
Mode connection. Each message is delivered to the HTTP one, redelivered to it with
`X-Slack-Retry-Num`, and pushed down the socket, all concurrently; each is answered once.
Under `THREADGATE_THREAD_QUEUE=collect` the first answer of each thread is held until every
message of the thread was delivered, so the next task covers the rest, duplicates and all.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from storage.database import Database
from tests.chaos.harness import (
    Conversation,
    Processes,
    SentEvent,
    answered,
    answered_through,
    assert_each_answered_once,
    assert_exactly_once_in_order,
    conversations,
    deliver_until_acked,
    marker_of,
    scaled,
    send_threads_in_order,
    wait_until_settled,
)
from tests.fakes.openai_api import Held, OpenAIServer, RecordedRequest, Reply
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import deliver
from tests.fakes.socket_mode import FakeSocketMode
from tests.gateway.rig import APP_TOKEN, BOT_TOKEN, SECRET, echo, gateway_env, socket_mode_env
from tests.pg import create_database


class FirstHeld:
    """The echo model, holding the answer to each thread's first message until `sent`."""

    def __init__(self, threads: list[Conversation]) -> None:
        self.threads, self.sent = threads, asyncio.Event()

    def __call__(self, seen: RecordedRequest) -> Reply:
        firsts = {t.sent[0].marker for t in self.threads if t.sent}
        return Held(self.sent, echo(seen)) if marker_of(seen) in firsts else echo(seen)


@pytest.mark.parametrize("queue_mode", ["followup", "collect"])
async def test_every_event_three_times_over_http_and_socket_mode_is_answered_once(
    postgres_dsn: str, tmp_path: Path, queue_mode: str
) -> None:
    """Each event delivered thrice (HTTP, HTTP retry, Socket Mode) to two gateways on one
    database is answered exactly once, in order within its thread; under collect the
    messages sent while the first is answered get one reply together."""
    dsn = await create_database(postgres_dsn, f"chaos_duplicates_{queue_mode}")
    collect = queue_mode == "collect"
    threads = conversations(scaled(6, 3), prefix="C0DUPES")
    held = FirstHeld(threads)
    processes = Processes(tmp_path)
    async with (
        FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as slack,
        FakeSocketMode(app_id=slack.app_id) as sockets,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        slack.socket_mode = sockets
        model.default = held if collect else echo
        env = gateway_env(slack, model, dsn) | {"THREADGATE_THREAD_QUEUE": queue_mode}
        try:
            web = await processes.start(env)
            await processes.start(socket_mode_env(env))
            await sockets.wait_for_connections(1, timeout=30)

            async def thrice(sent: SentEvent) -> None:
                envelope = sent.envelope
                first, socket_id, _ = await asyncio.gather(
                    deliver(http, web.events_url, envelope, SECRET),
                    sockets.deliver(envelope),
                    deliver(http, web.events_url, envelope, SECRET, retry_num=1),
                )
                await sockets.wait_for_ack(socket_id, timeout=30)
                if first[0] != 200:  # refused while the other path held the event: retry
                    await deliver_until_acked(http, lambda: web.events_url, sent)

            sent = await send_threads_in_order(threads, scaled(8, 4), thrice)
            held.sent.set()
            done = answered_through if collect else answered
            await slack.wait_until(done(slack, sent), 60, what="every reply")
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
        finally:
            await processes.stop_all()
    if not collect:
        return assert_exactly_once_in_order(slack, sent)
    # Each thread: its first message's reply, then one covering the others.
    covered = await assert_each_answered_once(slack, sent, dsn)
    assert len(slack.posts) == 2 * len(threads) and covered == len(sent) - 2 * len(threads)
