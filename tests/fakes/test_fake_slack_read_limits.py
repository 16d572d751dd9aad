"""The fake's limited read tier, driven by the real slack-sdk client: one call a minute per
method, 15 messages a page with a cursor, and 429 `ratelimited` with Retry-After: 60
beyond that, as Slack's reference says for distributed apps outside the Marketplace."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from .slack_api import FakeSlack

TOKEN = "xoxb-test"
CHANNEL = "C0LIMITED1"
ROOT = "1700000000.000001"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token=TOKEN) as fake:
        fake.seed_message(CHANNEL, ROOT, "U0ALICE01", "root")
        for n in range(2, 41):
            fake.seed_message(CHANNEL, f"1700000000.{n:06d}", "U0ALICE01", f"reply {n}", ROOT)
        fake.reads.limited = True
        yield fake


async def test_one_read_a_minute_of_at_most_fifteen_messages(slack: FakeSlack) -> None:
    """The minute's first conversations.replies is answered with 15 messages, `has_more`
    and a cursor, whatever limit was asked; the next that minute is a 429 with
    Retry-After 60; once the minute is over, the cursor reads on."""
    client = AsyncWebClient(token=TOKEN, base_url=slack.url)
    first = await client.conversations_replies(channel=CHANNEL, ts=ROOT, limit=200)
    assert len(first["messages"]) == 15 and first["has_more"] is True
    cursor = first["response_metadata"]["next_cursor"]
    with pytest.raises(SlackApiError) as caught:
        await client.conversations_replies(channel=CHANNEL, ts=ROOT, cursor=cursor)
    response = caught.value.response
    assert response.status_code == 429 and response["error"] == "ratelimited"
    assert response.headers["Retry-After"] == "60"
    slack.reads.advance(60)
    second = await client.conversations_replies(channel=CHANNEL, ts=ROOT, cursor=cursor)
    assert second["messages"][0]["text"] == "reply 16"
    assert len(slack.reads.answered) == 2 and len(slack.reads.refused) == 1


async def test_each_method_has_its_own_minute(slack: FakeSlack) -> None:
    """conversations.history is not held by a conversations.replies call, nor the other
    way round; neither is any other method."""
    client = AsyncWebClient(token=TOKEN, base_url=slack.url)
    await client.conversations_replies(channel=CHANNEL, ts=ROOT)
    history = await client.conversations_history(channel=CHANNEL)
    assert history["ok"] is True and len(history["messages"]) == 1
    assert (await client.auth_test())["ok"] is True
    with pytest.raises(SlackApiError):
        await client.conversations_history(channel=CHANNEL)
