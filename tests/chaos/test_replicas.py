"""Two replicas on one database under load: no duplicate replies, per-thread order kept.

Several threads receive several messages each; every message goes to a random one of two
real gateway processes (and one in four to both, as a retried delivery would).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import aiohttp

from storage.database import Database
from tests.chaos.harness import (
    NO_MESSAGE_LIMITS,
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
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database


async def test_two_replicas_under_load_answer_once_in_thread_order(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Two HTTP replicas sharing a database answer every message of several busy threads
    exactly once, in the order each thread's messages were sent."""
    dsn = await create_database(postgres_dsn, "chaos_replicas")
    rng = random.Random(7)
    processes = Processes(tmp_path)
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = echo
        # At full scale one user writes 100 messages into ten threads within the hour.
        env = gateway_env(slack, model, dsn) | NO_MESSAGE_LIMITS
        try:
            replicas = [await processes.start(env), await processes.start(env)]

            async def to_a_replica(sent: SentEvent) -> None:
                targets = replicas if rng.random() < 0.25 else [rng.choice(replicas)]
                await asyncio.gather(
                    *(deliver_until_acked(http, lambda r=r: r.events_url, sent) for r in targets)
                )

            threads = conversations(scaled(10, 5), prefix="C0REPLICA")
            sent = await send_threads_in_order(threads, scaled(10, 5), to_a_replica)
            await slack.wait_until(answered(slack, sent), 60, what="every reply")
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
        finally:
            await processes.stop_all()
    assert_exactly_once_in_order(slack, sent)
