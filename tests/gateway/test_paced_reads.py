"""Slack's thread reads, paced for every replica (gateway/slack/read_pacing.py), against the
fake Slack in the limited tier: one call a minute per method and workspace, shared through
Postgres; a `ratelimited` answer holds every replica and is not retried; the tier found."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agent import ConfigError
from gateway.operator.doctor import read_tier_finding
from gateway.slack.client import slack_client
from gateway.slack.read_pacing import ReadOutcome, ReadPacing, TierSetting
from gateway.slack.threads import SlackThreads
from gateway.slack.users import UserDirectory
from storage import Database, ReadTier, read_tier_of
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN, rig_settings

CHANNEL = "C0PACED001"
ROOTS = ("1700000100.000001", "1700000200.000001", "1700000300.000001")
REPLIES = "conversations.replies"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token=BOT_TOKEN) as fake:
        for root in ROOTS:
            fake.seed_message(CHANNEL, root, "U0ALICE01", f"root {root}")
            head = root.split(".")[0]
            for n in range(2, 31):
                fake.seed_message(CHANNEL, f"{head}.{n:06d}", "U0BOB0001", f"reply {n}", root)
        fake.reads.limited = True
        yield fake


@pytest.fixture
async def fresh_db(fresh_dsn: str) -> AsyncIterator[Database]:
    async with Database(fresh_dsn) as db:
        yield db


class Replica:
    """One process's reader: its own client and pacing, on the shared database."""

    def __init__(self, slack: FakeSlack, db: Database, tier: TierSetting) -> None:
        self.outcomes: list[tuple[str, ReadOutcome]] = []
        self.tiers: list[tuple[str, ReadTier]] = []
        client = slack_client(BOT_TOKEN, slack.url, timeout=15)
        self.pacing = ReadPacing(
            db,
            tier,
            on_read=lambda m, o: self.outcomes.append((m, o)),
            on_tier=lambda t, tier: self.tiers.append((t, tier)),
        )
        self.threads = SlackThreads(client, UserDirectory(client), self.pacing)

    async def read(self, team: str, root: str, seconds: float = 0.3):  # type: ignore[no-untyped-def]
        deadline = asyncio.get_running_loop().time() + seconds
        return await self.threads.read(CHANNEL, root, team=team, limit=50, deadline=deadline)


async def test_three_threads_on_two_replicas_make_one_call_a_minute(
    slack: FakeSlack, fresh_db: Database
) -> None:
    """Three threads read at once by two replicas in the limited tier: one
    conversations.replies call, 15 messages with the rest counted as not read; the other
    two deferred without a call, so Slack never answers ratelimited."""
    a, b = Replica(slack, fresh_db, "limited"), Replica(slack, fresh_db, "limited")
    reads = await asyncio.gather(
        a.read("T1", ROOTS[0]), b.read("T1", ROOTS[1]), a.read("T1", ROOTS[2])
    )
    done = [r for r in reads if r.messages]
    assert len(slack.calls_to(REPLIES)) == 1 and not slack.reads.refused
    (read,) = done
    assert len(read.messages) == 15 and not read.complete and read.total == 30
    # Its second page waits for the next minute too: every read stopped short.
    assert [r.stopped for r in reads] == ["deferred"] * 3
    assert ("conversations.replies", "deferred") in a.outcomes + b.outcomes


async def test_a_ratelimited_answer_holds_every_replica_and_is_not_retried(
    slack: FakeSlack, fresh_db: Database
) -> None:
    """Slack's 429 with Retry-After 60 is not retried by the client: the read stops
    `ratelimited` after one call, and another replica's read is then deferred without
    calling Slack at all."""
    slack.rate_limit(REPLIES, retry_after=60)
    a, b = Replica(slack, fresh_db, "internal"), Replica(slack, fresh_db, "internal")
    first = await a.read("T1", ROOTS[0])
    second = await b.read("T1", ROOTS[1], seconds=1.5)
    assert first.stopped == "rate_limited" and second.stopped == "deferred"
    assert len(slack.calls_to(REPLIES)) == 1
    assert (REPLIES, "rate_limited") in a.outcomes and (REPLIES, "deferred") in b.outcomes


async def test_auto_finds_the_limited_tier_from_a_capped_page_and_remembers_it(
    slack: FakeSlack, fresh_db: Database
) -> None:
    """With `auto`, a page of 15 given for 200 asked, with more to read, shows the limited
    tier: remembered in Postgres for every replica (a new one reads it there), shown, and
    the next read asks for 15 and waits its minute instead of calling."""
    a = Replica(slack, fresh_db, "auto")
    await a.read("T1", ROOTS[0])
    assert slack.calls_to(REPLIES)[0].params["limit"] == "200"
    assert await read_tier_of(fresh_db, "T1") == "limited"
    assert a.tiers[-1] == ("T1", "limited")
    b = Replica(slack, fresh_db, "auto")
    later = await b.read("T1", ROOTS[1])
    assert later.stopped == "deferred" and len(slack.calls_to(REPLIES)) == 1
    assert await b.pacing.page_size("T1") == 15


def test_doctor_shows_the_tier_set_or_found_and_warns_of_the_limited_one() -> None:
    """`doctor` names the tier THREADGATE_SLACK_READ_TIER sets; with `auto`, the
    workspaces found limited (a warning, with what showed it), else that none was."""
    env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "THREADGATE_MODEL": "openai:gpt-test"}
    limited = rig_settings(env | {"THREADGATE_SLACK_READ_TIER": "limited"})
    assert read_tier_finding(limited, []).detail.startswith("limited (one read a minute")
    auto = rig_settings(env)
    assert read_tier_finding(auto, [("T1", "internal", "first")]).status == "ok"
    found = read_tier_finding(auto, [("T1", "limited", "a capped page")])
    assert found.status == "warn" and "T1 (a capped page)" in found.detail


def test_a_wrong_tier_is_one_sentence_naming_the_variable() -> None:
    """THREADGATE_SLACK_READ_TIER takes auto, internal or limited; anything else stops
    with one sentence naming it."""
    with pytest.raises(ConfigError, match=r"^THREADGATE_SLACK_READ_TIER is invalid \(.*\.$"):
        rig_settings({"THREADGATE_SLACK_READ_TIER": "tier3"})
