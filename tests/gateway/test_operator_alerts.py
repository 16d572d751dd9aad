"""Operator alerts: one per failing credential per window, and honest about delivery."""

from __future__ import annotations

import asyncio

from agent import CredentialRejected, Route, Task
from gateway.delivery.alerts import OperatorAlerts
from gateway.slack.client import slack_client
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN

TASK = Task("T1:C1:1.0", "T1:C1:1.0", {"channel": "C1", "thread_ts": "1.0"})
REFUSED = CredentialRejected("refused", source="provider", route=Route("openai", "m"))


async def test_failures_at_the_same_moment_post_one_alert_and_all_say_it_was_sent() -> None:
    """Ten tasks refused at once: one post in the operator channel, and every task learns
    that an operator was told (so every user's notice may say so)."""
    async with FakeSlack(bot_token=BOT_TOKEN) as slack:
        gate = slack.hold("chat.postMessage")  # the post is in flight while the others arrive
        alerts = OperatorAlerts(slack_client(BOT_TOKEN, slack.url, timeout=15), "COPS")
        waiting = [asyncio.create_task(alerts.credential_failure(TASK, REFUSED)) for _ in range(10)]
        await slack.wait_until(lambda: bool(slack.calls_to("chat.postMessage")), 10)
        gate.set()
        results = await asyncio.gather(*waiting)
    assert results == [True] * 10
    assert [p.channel for p in slack.posts] == ["COPS"]


async def test_an_alert_that_could_not_be_posted_is_not_claimed_and_is_tried_again() -> None:
    """A failed post returns False (nobody was told), and the next failure posts again
    instead of being held back for the window."""
    async with FakeSlack(bot_token=BOT_TOKEN) as slack:
        client = slack_client(BOT_TOKEN, slack.url, timeout=15)
        alerts = OperatorAlerts(client, "COPS")
        slack.fail("chat.postMessage", status=500)
        assert await alerts.credential_failure(TASK, REFUSED) is False
        assert await alerts.credential_failure(TASK, REFUSED) is True
        assert await alerts.credential_failure(TASK, REFUSED) is True
    assert len(slack.posts) == 1


async def test_without_an_operator_channel_no_alert_is_claimed() -> None:
    async with FakeSlack(bot_token=BOT_TOKEN) as slack:
        alerts = OperatorAlerts(slack_client(BOT_TOKEN, slack.url, timeout=15), None)
        assert await alerts.credential_failure(TASK, REFUSED) is False
    assert slack.posts == []
