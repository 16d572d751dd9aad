"""Duplicates: every event arrives three times, over HTTP and Socket Mode at once.

Two real gateway processes share one database: one serves HTTP, the other holds a Socket
Mode connection. Each message is delivered to the HTTP one, redelivered to it with
`X-Slack-Retry-Num`, and pushed down the socket, all concurrently; each is answered once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from storage.database import Database
from tests.chaos.harness import (
    Processes,
    SentEvent,
    answered,
    assert_exactly_once_in_order,
    conversations,
    deliver_until_acked,
    scaled,
    send_threads_in_order,
    wait_until_settled,
)
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import deliver
from tests.fakes.socket_mode import FakeSocketMode
from tests.gateway.rig import APP_TOKEN, BOT_TOKEN, SECRET, echo, gateway_env, socket_mode_env
from tests.pg import create_database


async def test_every_event_three_times_over_http_and_socket_mode_is_answered_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Each event delivered thrice (HTTP, HTTP retry, Socket Mode) to two gateways on one
    database is answered exactly once, in order within its thread."""
    dsn = await create_database(postgres_dsn, "chaos_duplicates")
    processes = Processes(tmp_path)
    async with (
        FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as slack,
        FakeSocketMode(app_id=slack.app_id) as sockets,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        slack.socket_mode = sockets
        model.default = echo
        env = gateway_env(slack, model, dsn)
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

            threads = conversations(scaled(6, 3), prefix="C0DUPES")
            sent = await send_threads_in_order(threads, scaled(8, 4), thrice)
            await slack.wait_until(answered(slack, sent), 60, what="every reply")
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
        finally:
            await processes.stop_all()
    assert_exactly_once_in_order(slack, sent)
