"""Slack's limited read tier, with real gateway processes (issue 43, done when): three
threads first mentioned mid-thread within one minute, on two replicas, cost the workspace
one conversations.replies call and no ratelimited answer; every mention is acked at once
and answered; the model is told what it did not see, and the next turn reads it."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from storage.database import Database
from tests.chaos.harness import (
    NO_MESSAGE_LIMITS,
    Processes,
    SentEvent,
    deliver_once,
    new_marker,
    wait_until_settled,
)
from tests.fakes.openai_api import OpenAIServer, RecordedRequest
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, event_callback, new_ts
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database

REPLIES = "conversations.replies"
CHANNEL = "C0LIMITED1"
NOTE = re.compile(
    r"<runtime source=\"context_gap\">(\d+|Some) earlier messages in this thread were not read"
)


def seed_thread(slack: FakeSlack, replies: int) -> str:
    """A thread Slack holds (written before the app was there: no events), its root's ts."""
    root = new_ts()
    slack.seed_message(CHANNEL, root, "U0BOB00001", "thread root")
    for n in range(1, replies + 1):
        slack.seed_message(CHANNEL, new_ts(), "U0BOB00001", f"reply {n} of {root}", root)
    return root


def mention_in(slack: FakeSlack, root: str) -> SentEvent:
    marker, ts = new_marker(), new_ts()
    text = f"<@UBOT> catch me up {marker}"
    slack.seed_message(CHANNEL, ts, "U0A1B2C3D4E", text, root)
    event = app_mention_event(text=text, channel=CHANNEL, ts=ts, thread_ts=root)
    return SentEvent(event_callback(event), marker)


def request_of(model: OpenAIServer, sent: SentEvent) -> RecordedRequest:
    (found,) = [r for r in model.requests if sent.marker in str(r.body["messages"][-1])]
    return found


async def test_three_threads_on_two_replicas_in_the_limited_tier(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """One conversations.replies call for three first mentions on two replicas, no 429,
    each acked at its first delivery and answered; the thread read says how many it did
    not see and the others that some were not read; a minute later the next turn in an
    unread thread reads it."""
    dsn = await create_database(postgres_dsn, "chaos_read_limits")
    processes = Processes(tmp_path)
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        slack.reads.limited = True
        model.default = echo
        env = gateway_env(slack, model, dsn) | NO_MESSAGE_LIMITS
        try:
            replicas = [await processes.start(env), await processes.start(env)]
            roots = [seed_thread(slack, 20) for _ in range(3)]
            sent = [mention_in(slack, root) for root in roots]
            for n, one in enumerate(sent):
                assert await deliver_once(http, replicas[n % 2].events_url, one)
            await slack.wait_until(lambda: len(slack.posts) >= 3, 60, what="three replies")
            assert len(slack.calls_to(REPLIES)) == 1 and not slack.reads.refused
            notes = [NOTE.search(str(request_of(model, s).body["messages"][-1])) for s in sent]
            counts = sorted(str(m.group(1)) for m in notes if m)
            assert counts == ["6", "Some", "Some"]
            unread = next(s for s, m in zip(sent, notes, strict=True) if m and m.group(1) == "Some")
            slack.reads.advance(60)
            async with Database(dsn, min_size=1, max_size=1) as db:
                await db.pool.execute("UPDATE slack_read_budgets SET next_at = now()")
                again = mention_in(slack, unread.thread_ts)
                assert await deliver_once(http, replicas[0].events_url, again)
                await slack.wait_until(lambda: len(slack.posts) >= 4, 60, what="the next turn")
                await wait_until_settled(db)
            seen = str(request_of(model, again).body["messages"])
            assert f"reply 1 of {unread.thread_ts}" in seen
            assert len(slack.calls_to(REPLIES)) == 2 and not slack.reads.refused
        finally:
            await processes.stop_all()
