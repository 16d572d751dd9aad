"""Settling a post whose outcome is unknown, when the thread is hard to read.

Every reply here is stored by Slack and then answered 500, so the outbox must look for
it in the thread; and that look fails: 429s past the client's own retries, 5xx pages,
`missing_scope` (a group DM without `mpim:history`). The reader retries within a bound,
then settles on one outcome — never "reply plus failure notice", never "notice only".
The look matches only our own bot's posts since the claim: a message by someone else
carrying our metadata, or an old copy, is not our post.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from storage.database import Database
from tests.chaos.harness import (
    Conversation,
    Processes,
    SentEvent,
    answered,
    deliver_until_acked,
    replies_in,
    wait_until_settled,
)
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import new_ts, ts_from_micros
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database

REPLIES = "conversations.replies"
POST = "chat.postMessage"
METADATA_EVENT = "threadgate_post"


@dataclass
class Gateway:
    slack: FakeSlack
    web: GatewayProcess
    http: aiohttp.ClientSession
    dsn: str

    async def ask(self, sent: SentEvent) -> list[str]:
        """Send one message, wait until its task is settled (no post can follow), and
        return every text the bot posted in its thread."""
        await deliver_until_acked(self.http, lambda: self.web.events_url, sent)
        await self.slack.wait_until(answered(self.slack, [sent]), 90, what="the reply")
        async with Database(self.dsn, min_size=1, max_size=1) as db:
            await wait_until_settled(db, deadline=90)
        return self.slack.thread(sent.channel, sent.thread_ts)


@pytest.fixture(scope="module")
async def gateway(
    postgres_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Gateway]:
    """One gateway for the scenarios, which run one after another (faults are queued per
    method, so each scenario's must be consumed by its own message)."""
    dsn = await create_database(postgres_dsn, "chaos_reconcile_faults")
    processes = Processes(Path(tmp_path_factory.mktemp("reconcile")))
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = echo
        # Slack shows a stored post at once here; the margin only paces the test.
        env = gateway_env(slack, model, dsn) | {"THREADGATE_SLACK_SETTLE_SECONDS": "0.5"}
        try:
            yield Gateway(slack, await processes.start(env), http, dsn)
        finally:
            await processes.stop_all()


def rate_limited(slack: FakeSlack) -> None:
    """7 in a row: past slack_sdk's own 5 retries of a 429. `Retry-After: 0`, because the
    count is the point here, not the wait (tests/chaos/test_slack_faults.py checks that a
    Retry-After is honoured; slack_sdk still waits up to a second after each)."""
    slack.rate_limit(REPLIES, times=7, retry_after=0)


def server_errors(slack: FakeSlack) -> None:
    """500 and 503 are retried by slack_sdk for reads; 502 and 504 only by the reader."""
    for status in (500, 502, 503, 504, 500):
        slack.fail(REPLIES, status=status)


def scope_missing(slack: FakeSlack) -> None:
    """As long as the scope is missing, every read is refused."""
    slack.refuse(REPLIES, "missing_scope", times=100)


READ_FAULTS: dict[str, Callable[[FakeSlack], None]] = {
    "429": rate_limited,
    "5xx": server_errors,
    "missing_scope": scope_missing,
}


@pytest.mark.parametrize("fault", list(READ_FAULTS))
async def test_an_unreadable_thread_settles_on_one_reply_and_no_notice(
    gateway: Gateway, fault: str
) -> None:
    """The reply landed and was answered 500; reading the thread fails with `fault`:
    the thread shows the reply once, and no failure notice."""
    slack = gateway.slack
    sent = Conversation(f"C0READ{fault.upper().replace('_', '')}").next_message()
    slack.fail_after_recording(POST, status=500)
    READ_FAULTS[fault](slack)
    posts_before = len(slack.calls_to(POST))
    try:
        thread = await gateway.ask(sent)
    finally:
        slack.clear_faults(REPLIES)
    assert len(thread) == 1 and thread[0].startswith("re: ") and sent.marker in thread[0], thread
    assert len(slack.calls_to(POST)) - posts_before == 1


async def test_our_metadata_on_someone_elses_message_is_not_our_post(gateway: Gateway) -> None:
    """Another bot copied our metadata into the thread; our post failed (a 500 page,
    nothing stored): the look must not take their message for ours, and posts."""
    slack = gateway.slack
    conversation = Conversation("C0FORGED")
    sent = conversation.next_message()
    root = sent.thread_ts
    slack.seed_message(sent.channel, root, "U0A1B2C3D4E", str(sent.event["text"]))
    forged = slack.seed_message(sent.channel, new_ts(), "U0MALLORY01", "re: fake", thread_ts=root)
    forged |= {"bot_id": "B0MALLORY01", "metadata": our_metadata(sent)}
    slack.fail(POST, status=500)
    thread = await gateway.ask(sent)
    assert len(thread) == 1 and thread == replies_texts(slack, sent), thread


async def test_an_old_copy_from_before_the_claim_is_not_our_post(gateway: Gateway) -> None:
    """An hour-old message of our bot carries the same metadata (a restored database
    would leave one): the look starts at the claim, so our failed post is posted."""
    slack = gateway.slack
    micros = int(new_ts().replace(".", ""))
    root = ts_from_micros(micros - 7_200_000_000)
    channel = "C0OLDCOPY"
    slack.seed_message(channel, root, "U0A1B2C3D4E", "the plan")
    conversation = Conversation(channel, root=root)
    sent = conversation.next_message()
    old = slack.seed_message(
        channel, ts_from_micros(micros - 3_600_000_000), slack.bot_user_id, "re: old", root
    )
    old |= {"bot_id": slack.bot_id, "metadata": our_metadata(sent)}
    slack.fail(POST, status=500)
    await gateway.ask(sent)
    assert len(replies_texts(slack, sent)) == 1


def our_metadata(sent: SentEvent) -> dict[str, object]:
    return {
        "event_type": METADATA_EVENT,
        "event_payload": {"outbox_id": f"task:{sent.task_id}:reply"},
    }


def replies_texts(slack: FakeSlack, sent: SentEvent) -> list[str]:
    return [
        p.text for p in replies_in(slack, sent.channel, sent.thread_ts) if sent.marker in p.text
    ]
