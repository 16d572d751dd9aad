"""All models down: the person hears early, the thread is freed in time (issues 9 and 37).

Both model slots answer 503. Without `Retry-After` (the usual outage) each message is
tried at most THREADGATE_MAX_DEFERRALS times, spread over THREADGATE_MAX_DEFERRAL_SECONDS,
each try asking both slots THREADGATE_MODEL_ATTEMPTS times; the thread's first post is the
"still trying" notice, its second the notice that the models are unavailable, and its
next message is answered once a model is back. A short `Retry-After` is honoured without
the early notice, and one reaching past the bound (a day, or 1e303 — which overflows
Postgres's interval type) ends the task at once instead of parking or looping. The
windows are shortened by settings, not waited out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from agent import RetryPolicy
from agent.durable.notices import DEFAULT_NOTICES
from agent.durable.runner import DEFAULT_RUNNER
from storage.database import Database
from tests.chaos.harness import (
    Conversation,
    Processes,
    SentEvent,
    conversations,
    deliver_until_acked,
    marker_of,
    replies_in,
    scaled,
    wait_until_settled,
)
from tests.fakes.openai_api import OpenAIServer, RecordedRequest, Reply, error_reply
from tests.fakes.slack_api import FakeSlack, Post
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database

MAX_DEFERRALS = 3
SLOTS = 2
# Each try asks each slot this often (THREADGATE_MODEL_ATTEMPTS, left at its default).
ATTEMPTS = RetryPolicy().attempts_per_slot


def down_without_retry_after(seen: RecordedRequest) -> Reply:
    return error_reply(503, "overloaded", "server_error")


def down(retry_after: str) -> Callable[[RecordedRequest], Reply]:
    def answer(seen: RecordedRequest) -> Reply:
        return error_reply(503, "overloaded", "server_error", headers={"Retry-After": retry_after})

    return answer


def thread_posts(slack: FakeSlack, sent: SentEvent) -> list[Post]:
    return [p for p in slack.posts if (p.channel, p.thread_ts) == (sent.channel, sent.thread_ts)]


async def test_every_model_down_tells_the_person_first_then_gives_up_and_answers_later(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """503 without Retry-After from both slots, default tries and attempts (windows
    shortened): each thread's first post says the bot keeps trying, its second that it
    gave up; each message cost at most 30 model requests (both slots, every attempt, every
    try); and the thread's next message is answered once, once a model is back."""
    dsn = await create_database(postgres_dsn, "chaos_down_no_retry_after")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = down_without_retry_after
        env = gateway_env(slack, model, dsn) | {
            "THREADGATE_FALLBACK_MODEL": "openai:gpt-fallback",
            "THREADGATE_MAX_DEFERRAL_SECONDS": "6",
            "THREADGATE_MODELS_DOWN_NOTICE_SECONDS": "1",
            "THREADGATE_MODEL_RETRY_SECONDS": "0.01",
        }
        processes = Processes(tmp_path)
        try:
            web = await processes.start(env)

            async def send(sent: SentEvent) -> None:
                await deliver_until_acked(http, lambda: web.events_url, sent)

            threads = conversations(scaled(4, 2), prefix="C0NOWORD")
            first = [thread.next_message() for thread in threads]
            for sent in first:
                await send(sent)
            await slack.wait_until(
                lambda: all(len(thread_posts(slack, s)) >= 2 for s in first), 60, what="give-ups"
            )
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
                tries = {s.marker: await tries_of(db, s) for s in first}
            model.default = echo
            second = [thread.next_message() for thread in threads]
            for sent in second:
                await send(sent)
            await slack.wait_until(
                lambda: all(replies_in(slack, s.channel, s.thread_ts) for s in second),
                60,
                what="every reply",
            )
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
        finally:
            await processes.stop_all()
    per_message = Counter(marker_of(r) for r in model.requests)
    for one, two in zip(first, second, strict=True):
        texts = [p.text for p in thread_posts(slack, one)]
        assert texts[:2] == [DEFAULT_NOTICES.still_trying, DEFAULT_NOTICES.unavailable], texts
        assert len(texts) == 3 and two.marker in texts[2] and one.marker not in texts[2]
        assert 2 <= tries[one.marker] <= DEFAULT_RUNNER.max_deferrals
        assert per_message[one.marker] == SLOTS * ATTEMPTS * tries[one.marker] <= 30
        assert per_message[two.marker] == 1


async def tries_of(db: Database, sent: SentEvent) -> int:
    """How often the task of `sent` was claimed (its attempts)."""
    return int(await db.pool.fetchval("SELECT attempts FROM tasks WHERE id = $1", sent.task_id))


@pytest.mark.parametrize(
    ("retry_after", "claims"),
    [
        pytest.param("1", MAX_DEFERRALS, id="retry-after-1s"),
        pytest.param("86400", 1, id="retry-after-a-day"),
        pytest.param("1e303", 1, id="retry-after-1e303"),
    ],
)
async def test_both_models_down_end_in_one_notice_then_the_thread_answers_again(
    postgres_dsn: str, tmp_path: Path, retry_after: str, claims: int
) -> None:
    """With a Retry-After, every thread gets exactly one "unavailable" notice after
    `claims` tries (each try asks both slots once), and no early notice (the next try was
    never far off); when the model is back, the next message in each thread gets exactly
    one reply."""
    dsn = await create_database(postgres_dsn, f"chaos_down_{claims}_{len(retry_after)}")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = down(retry_after)
        env = gateway_env(slack, model, dsn) | {
            "THREADGATE_FALLBACK_MODEL": "openai:gpt-fallback",
            "THREADGATE_MODEL_ATTEMPTS": "1",
            "THREADGATE_MAX_DEFERRALS": str(MAX_DEFERRALS),
            "THREADGATE_MAX_DEFERRAL_SECONDS": "120",
        }
        processes = Processes(tmp_path)
        try:
            web = await processes.start(env)

            async def send(sent: SentEvent) -> None:
                await deliver_until_acked(http, lambda: web.events_url, sent)

            threads: list[Conversation] = conversations(scaled(4, 2), prefix="C0DOWN")
            first = [thread.next_message() for thread in threads]
            for sent in first:
                await send(sent)
            await slack.wait_until(
                lambda: all(thread_posts(slack, s) for s in first), 90, what="every notice"
            )
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
            model.default = echo
            second = [thread.next_message() for thread in threads]
            for sent in second:
                await send(sent)
            await slack.wait_until(
                lambda: all(replies_in(slack, s.channel, s.thread_ts) for s in second),
                60,
                what="every reply",
            )
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
        finally:
            await processes.stop_all()
    for one, two in zip(first, second, strict=True):
        texts = [p.text for p in thread_posts(slack, one)]
        assert texts[0] == DEFAULT_NOTICES.unavailable, slack.describe()
        assert len(texts) == 2 and two.marker in texts[1] and one.marker not in texts[1]
    per_message = Counter(marker_of(r) for r in model.requests)
    assert {per_message[s.marker] for s in first} == {2 * claims}, per_message
    assert {per_message[s.marker] for s in second} == {1}
