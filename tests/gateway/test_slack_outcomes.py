"""Callers of Slack act on the outcome of a failed call (gateway/slack/errors.py): refused,
outcome unknown or unavailable, each through the real client against the fake Slack."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from agent import ConfigError
from gateway.inbound.socket_mode import probe_socket_mode
from gateway.process.slack_clients import identify
from gateway.slack.client import slack_client
from gateway.slack.errors import SlackOutcomeUnknown
from gateway.slack.threads import SlackThreads
from gateway.slack.users import UserDirectory
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import APP_TOKEN, BOT_TOKEN

CHANNEL = "C0THREAD01"
ROOT = "1700000000.000001"
# Nothing listens on the discard port: a call there never reaches anyone.
NOWHERE = "http://127.0.0.1:9/api/"


def thread_reader(slack: FakeSlack) -> SlackThreads:
    client = slack_client(BOT_TOKEN, slack.url, timeout=15)
    return SlackThreads(client, UserDirectory(client))


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake:
        yield fake


async def test_a_refused_name_is_remembered_and_an_unanswered_one_is_not(
    slack: FakeSlack,
) -> None:
    """users.info refused (no such user) stands in the id for a while; an unknown outcome
    stands it in once, and the next lookup asks again."""
    users = UserDirectory(slack_client(BOT_TOKEN, slack.url, timeout=15))
    assert await users.name("U0NOBODY1") == "U0NOBODY1"
    assert await users.name("U0NOBODY1") == "U0NOBODY1"
    assert len(slack.calls_to("users.info")) == 1
    slack.add_user("U0ALICE01", name="alice")
    slack.refuse("users.info", "internal_error")
    assert await users.name("U0ALICE01") == "U0ALICE01"
    assert await users.name("U0ALICE01") == "alice"


async def test_a_thread_read_that_fails_midway_keeps_the_pages_read(
    slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    """A page Slack refuses ends the read: the pages before it are what there is, and the
    refusal is logged with Slack's error."""
    slack.seed_message(CHANNEL, ROOT, "U0ALICE01", "root")
    for n in range(2, 202):
        slack.seed_message(CHANNEL, f"1700000000.{n:06d}", "U0ALICE01", f"reply {n}", ROOT)
    threads = thread_reader(slack)
    gate = slack.hold("conversations.replies")
    read = asyncio.create_task(threads.messages(CHANNEL, ROOT, limit=500))
    await slack.wait_until(lambda: len(slack.calls_to("conversations.replies")) == 1)
    slack.refuse("conversations.replies", "ratelimited")
    with caplog.at_level(logging.WARNING, logger="gateway.slack.threads"):
        gate.set()
        found = await read
    assert len(found) == 200 and found[0].text == "root"
    assert len(slack.calls_to("conversations.replies")) == 2
    assert "conversations.replies failed" in caplog.text and "ratelimited" in caplog.text


async def test_a_thread_read_past_its_deadline_says_so(
    slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    """A read cut by its time budget is logged as such, not as a failure of Slack's."""
    threads = thread_reader(slack)
    with caplog.at_level(logging.WARNING, logger="gateway.slack.threads"):
        found = await threads.messages(
            CHANNEL, ROOT, limit=10, deadline=asyncio.get_running_loop().time()
        )
    assert found == []
    assert "cut by the time budget" in caplog.text and "failed" not in caplog.text


async def test_start_up_says_whether_slack_refused_failed_or_was_not_reached(
    slack: FakeSlack,
) -> None:
    """auth.test at start: an unknown outcome, an unreachable Slack and a refused token
    each stop start-up with their own sentence."""
    client = slack_client(BOT_TOKEN, slack.url, timeout=15)
    slack.refuse("auth.test", "internal_error")
    with pytest.raises(ConfigError, match=r"Slack failed on auth.test .*\(internal_error\)"):
        await identify(client, BOT_TOKEN)
    with pytest.raises(ConfigError, match="Slack could not be reached at SLACK_API_URL"):
        await identify(slack_client(BOT_TOKEN, NOWHERE, timeout=15), BOT_TOKEN)
    slack.revoke_token()
    with pytest.raises(ConfigError, match=r"SLACK_BOT_TOKEN was refused by Slack \(token_rev"):
        await identify(client, BOT_TOKEN)


async def test_the_socket_mode_probe_raises_the_outcome_of_its_failure(slack: FakeSlack) -> None:
    """apps.connections.open answered with Slack's internal error is an unknown outcome for
    the doctor; a refused app token is a ConfigError naming it."""
    slack.refuse("apps.connections.open", "internal_error")
    with pytest.raises(SlackOutcomeUnknown, match="internal_error"):
        await probe_socket_mode(app_token=APP_TOKEN, api_url=slack.url)
    with pytest.raises(ConfigError, match=r"SLACK_APP_TOKEN was refused by Slack \(invalid_auth"):
        await probe_socket_mode(app_token="xapp-1-A0APP00001-wrong", api_url=slack.url)
