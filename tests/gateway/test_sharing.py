"""Whether a channel is shared with another organization, from `conversations.info` over
the real client against the fake Slack; anything short of an answer is `unknown`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.slack.client import slack_client
from gateway.slack.sharing import ChannelSharing, sharing_of
from tests.fakes.slack_api import FakeSlack

TOKEN = "xoxb-test"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"is_ext_shared": True, "is_shared": True}, "external"),
        ({"is_pending_ext_shared": True, "is_ext_shared": False}, "external"),
        ({"is_shared": True, "is_org_shared": False, "is_ext_shared": False}, "external"),
        ({"is_shared": True, "is_org_shared": True, "is_ext_shared": False}, "internal"),
        ({"is_shared": False, "is_ext_shared": False}, "internal"),
        ({"is_im": True, "is_org_shared": False}, "internal"),
        ({"id": "C1", "name": "general"}, "unknown"),
    ],
)
def test_the_conversation_object_says_how_it_is_shared(
    flags: dict[str, Any], expected: str
) -> None:
    """Slack Connect (or an invitation out) is external; sharing only within the Grid
    organization is internal; an object saying nothing of sharing is unknown."""
    assert sharing_of(flags) == expected


def test_something_that_is_no_conversation_object_is_unknown() -> None:
    """A missing or malformed `channel` is no answer."""
    assert sharing_of(None) == sharing_of("C1") == "unknown"


async def test_conversations_info_tells_a_connect_channel_from_an_internal_one() -> None:
    """The fake answers as Slack's reference says; the check reads the flags."""
    async with FakeSlack(bot_token=TOKEN) as slack:
        slack.channels.share("C0CONNECT01", external=True, teams=["T1", "T9"])
        slack.channels.share("C0GRIDWIDE1", external=False, org=True)
        sharing = ChannelSharing(slack_client(TOKEN, slack.url, timeout=5))
        assert await sharing.sharing("C0CONNECT01") == "external"
        assert await sharing.sharing("C0GRIDWIDE1") == "internal"
        assert await sharing.sharing("C0INTERNAL1") == "internal"
        assert await sharing.sharing("D0DIRECTMSG") == "internal"


async def test_a_definite_answer_is_cached_for_a_while_and_then_asked_again() -> None:
    """Within the time to live a channel costs one call; after it, the next message asks."""
    clock = Clock()
    async with FakeSlack(bot_token=TOKEN) as slack:
        client = slack_client(TOKEN, slack.url, timeout=5)
        sharing = ChannelSharing(client, ttl_seconds=60, clock=clock)
        assert await sharing.sharing("C0INTERNAL1") == "internal"
        slack.channels.share("C0INTERNAL1")  # shared with another organization since
        assert await sharing.sharing("C0INTERNAL1") == "internal"
        assert len(slack.calls_to("conversations.info")) == 1
        clock.now = 61
        assert await sharing.sharing("C0INTERNAL1") == "external"
        assert len(slack.calls_to("conversations.info")) == 2


@pytest.mark.parametrize("fault", ["refused", "missing_scope", "server_error"])
async def test_no_answer_is_unknown_and_not_cached(fault: str) -> None:
    """A refusal (no such channel, a scope missing) or a failing Slack is `unknown`, and
    the next message asks again."""
    async with FakeSlack(bot_token=TOKEN) as slack:
        if fault == "server_error":
            slack.fail("conversations.info", status=500, times=3)
        else:
            error = "channel_not_found" if fault == "refused" else "missing_scope"
            slack.refuse("conversations.info", error)
        sharing = ChannelSharing(slack_client(TOKEN, slack.url, timeout=5))
        assert await sharing.sharing("C0INTERNAL1") == "unknown"
        assert await sharing.sharing("C0INTERNAL1") == "internal"


async def test_an_answer_not_in_time_is_unknown() -> None:
    """A Slack that does not answer by the deadline leaves the channel unknown."""
    async with FakeSlack(bot_token=TOKEN) as slack:
        slack.hold("conversations.info")
        sharing = ChannelSharing(slack_client(TOKEN, slack.url, timeout=5))
        deadline = asyncio.get_running_loop().time() + 0.2
        assert await sharing.sharing("C0INTERNAL1", deadline) == "unknown"
