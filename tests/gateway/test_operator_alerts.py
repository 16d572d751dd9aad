"""Operator alerts: one per failing credential per window for the whole deployment, and
honest about delivery."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from agent import CredentialRejected, Route, Task
from agent.models.providers.classify import classify_status
from gateway.delivery.alerts import AlertWindows, OperatorAlerts, describe_failure
from gateway.slack.client import slack_client
from storage import Database, PostgresAlertThrottle
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN

TASK = Task("T1:C1:1.0", "T1:C1:1.0", {"channel": "C1", "thread_ts": "1.0"})
REFUSED = CredentialRejected("refused", source="provider", route=Route("openai", "m"))


@pytest.fixture
async def db(fresh_dsn: str) -> AsyncIterator[Database]:
    """A database of this test's own: the alert windows it keeps start empty."""
    async with Database(fresh_dsn, min_size=1, max_size=4) as database:
        yield database


def windows(db: Database, window_seconds: float = 900.0) -> AlertWindows:
    return AlertWindows(PostgresAlertThrottle(db), window_seconds=window_seconds)


async def test_failures_at_the_same_moment_post_one_alert_and_all_say_it_was_sent(
    db: Database,
) -> None:
    """Ten tasks refused at once: one post in the operator channel, and every task learns
    that an operator was told (so every user's notice may say so)."""
    async with FakeSlack(bot_token=BOT_TOKEN) as slack:
        gate = slack.hold("chat.postMessage")  # the post is in flight while the others arrive
        alerts = OperatorAlerts(slack_client(BOT_TOKEN, slack.url, timeout=15), "COPS", windows(db))
        waiting = [asyncio.create_task(alerts.credential_failure(TASK, REFUSED)) for _ in range(10)]
        await slack.wait_until(lambda: bool(slack.calls_to("chat.postMessage")), 10)
        gate.set()
        results = await asyncio.gather(*waiting)
    assert results == [True] * 10
    assert [p.channel for p in slack.posts] == ["COPS"]


async def test_replicas_share_one_window(fresh_dsn: str) -> None:
    """Two replicas (each its own alerts and its own connections) refused at once post one
    alert between them; the one that did not post learns from the database that it went
    out, once it has."""
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        Database(fresh_dsn, min_size=1, max_size=2) as one,
        Database(fresh_dsn, min_size=1, max_size=2) as two,
    ):
        gate = slack.hold("chat.postMessage")
        client = slack_client(BOT_TOKEN, slack.url, timeout=15)
        replicas = [OperatorAlerts(client, "COPS", windows(db)) for db in (one, two)]
        waiting = [asyncio.create_task(r.credential_failure(TASK, REFUSED)) for r in replicas]
        await slack.wait_until(lambda: bool(slack.calls_to("chat.postMessage")), 10)
        gate.set()
        results = await asyncio.gather(*waiting)
    assert results == [True, True]
    assert [p.channel for p in slack.posts] == ["COPS"]


async def test_the_next_window_says_how_many_repeats_were_held_back(db: Database) -> None:
    """Repeats inside a window are not posted; the next window's alert counts them."""
    async with FakeSlack(bot_token=BOT_TOKEN) as slack:
        client = slack_client(BOT_TOKEN, slack.url, timeout=15)
        alerts = OperatorAlerts(client, "COPS", windows(db))
        for _ in range(3):
            assert await alerts.credential_failure(TASK, REFUSED) is True
        later = OperatorAlerts(client, "COPS", windows(db, window_seconds=0))
        assert await later.credential_failure(TASK, REFUSED) is True
    assert len(slack.posts) == 2
    assert "2 repeat(s) in the last window were not posted." in slack.posts[1].text
    assert "repeat" not in slack.posts[0].text


async def test_an_alert_that_could_not_be_posted_is_not_claimed_and_is_tried_again(
    db: Database,
) -> None:
    """A failed post returns False (nobody was told), and the next failure posts again
    instead of being held back for the window."""
    async with FakeSlack(bot_token=BOT_TOKEN) as slack:
        client = slack_client(BOT_TOKEN, slack.url, timeout=15)
        alerts = OperatorAlerts(client, "COPS", windows(db))
        slack.fail("chat.postMessage", status=500)
        assert await alerts.credential_failure(TASK, REFUSED) is False
        assert await alerts.credential_failure(TASK, REFUSED) is True
        assert await alerts.credential_failure(TASK, REFUSED) is True
    assert len(slack.posts) == 1


async def test_without_an_operator_channel_no_alert_is_claimed(db: Database) -> None:
    """No operator channel: nobody is told, so no failure may say an operator was."""
    async with FakeSlack(bot_token=BOT_TOKEN) as slack:
        alerts = OperatorAlerts(slack_client(BOT_TOKEN, slack.url, timeout=15), None, windows(db))
        assert await alerts.credential_failure(TASK, REFUSED) is False
        assert await alerts.credential_failure(TASK, REFUSED) is False
    assert slack.posts == []


async def test_an_alert_is_sent_when_the_database_cannot_be_asked(fresh_dsn: str) -> None:
    """With the throttle's database gone, the alert is posted anyway: twice is better than
    never."""
    database = Database(fresh_dsn, min_size=1, max_size=1)
    await database.open()
    await database.close()
    async with FakeSlack(bot_token=BOT_TOKEN) as slack:
        client = slack_client(BOT_TOKEN, slack.url, timeout=15)
        alerts = OperatorAlerts(client, "COPS", windows(database))
        assert await alerts.credential_failure(TASK, REFUSED) is True
    assert [p.channel for p in slack.posts] == ["COPS"]


def test_an_alert_names_the_key_of_the_route_that_was_refused() -> None:
    """A route with a key of its own (THREADGATE_ROUTES' `apiKey`): the refusal and the
    operator alert name that variable, not the vendor's usual one (issue 35)."""
    route = Route("openai", "gpt-4.1", 1, "GATEWAY_OPENAI_KEY")
    error = classify_status(
        401, {}, b'{"error": {"message": "bad", "code": "invalid_api_key"}}', route=route
    )
    assert isinstance(error, CredentialRejected) and "GATEWAY_OPENAI_KEY" in str(error)
    now = datetime.now(UTC)
    alert = describe_failure(error, first_seen=now, last_seen=now, suppressed=0)
    assert "Check GATEWAY_OPENAI_KEY" in alert and "OPENAI_API_KEY" not in alert
