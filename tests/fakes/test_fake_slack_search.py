"""The fake's Real-time Search, driven by slack-sdk's own `assistant_search_context`: it
answers a person's action token with what that person may see, and refuses as Slack does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from .slack_api import FakeSlack
from .slack_events import app_mention_event, dm_message_event, new_ts
from .slack_search import expire_action_token, grant_action_token

TOKEN, APP_TOKEN = "xoxb-test", "xapp-1-A0APP00001-test"
ADA, BOB = "U0A1B2C3D4E", "U0B0B0B0B01"
LAUNCH, SECRET_ROOM = "C0LAUNCH001", "G0SECRET001"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token=TOKEN, app_token=APP_TOKEN, team_id="T1") as fake:
        fake.add_user(ADA, name="ada", display_name="Ada")
        fake.search.channel(LAUNCH, "launch-plans")
        fake.search.channel(SECRET_ROOM, "board", kind="private_channel", members={BOB})
        fake.seed_message(LAUNCH, new_ts(), ADA, "The launch moves to May 3.")
        fake.seed_message(SECRET_ROOM, new_ts(), BOB, "Launch budget is cut in half.")
        fake.seed_message(LAUNCH, new_ts(), ADA, "Lunch is at noon.")
        yield fake


def client(slack: FakeSlack, token: str = TOKEN) -> AsyncWebClient:
    return AsyncWebClient(token=token, base_url=slack.url, retry_handlers=[])


async def search(slack: FakeSlack, **arguments: Any) -> dict[str, Any]:
    response = await client(slack).assistant_search_context(**arguments)
    assert isinstance(response.data, dict)
    return response.data


ALL_TYPES = ["public_channel", "private_channel", "mpim", "im"]


async def test_a_person_finds_public_messages_and_only_the_private_ones_they_are_in(
    slack: FakeSlack,
) -> None:
    """Ada (not in #board) finds the public launch message and not the private one; Bob,
    a member of #board, finds both; each answer has the reference's fields."""
    ada, bob = grant_action_token(ADA, "T1"), grant_action_token(BOB, "T1")
    mine = await search(slack, query="launch", action_token=ada, channel_types=ALL_TYPES)
    [found] = mine["results"]["messages"]
    assert found["content"] == "The launch moves to May 3."
    assert (found["author_user_id"], found["author_name"]) == (ADA, "Ada")
    assert (found["channel_id"], found["channel_name"]) == (LAUNCH, "launch-plans")
    assert found["permalink"].startswith(f"https://threadgate-test.slack.com/archives/{LAUNCH}/p")
    assert found["is_author_bot"] is False and mine["response_metadata"]["next_cursor"] == ""
    theirs = await search(slack, query="launch", action_token=bob, channel_types=ALL_TYPES)
    assert {m["channel_id"] for m in theirs["results"]["messages"]} == {LAUNCH, SECRET_ROOM}
    public = await search(slack, query="launch", action_token=bob)  # default: public only
    assert {m["channel_id"] for m in public["results"]["messages"]} == {LAUNCH}
    assert [s.user for s in slack.search.searches] == [ADA, BOB, BOB]


async def test_the_events_carry_tokens_the_search_takes(slack: FakeSlack) -> None:
    """A mention's and a DM's action token each search as their writer."""
    for event in (app_mention_event(text="<@UBOT> hi", user=ADA), dm_message_event(text="hi")):
        answer = await search(slack, query="launch", action_token=event["action_token"])
        assert answer["ok"] is True
    assert [s.user for s in slack.search.searches] == [ADA, ADA]


@pytest.mark.parametrize("token", [None, "12345.98765.abcd2358fdea", "expired"])
async def test_no_token_an_unknown_one_or_an_expired_one_is_refused(
    slack: FakeSlack, token: str | None
) -> None:
    """A bot token searches only with a live action token it was handed in an event."""
    if token == "expired":
        token = grant_action_token(ADA, "T1")
        expire_action_token(token)
    with pytest.raises(SlackApiError) as refused:
        await search(slack, query="launch", action_token=token)
    assert refused.value.response["error"] == "invalid_action_token"


async def test_the_app_token_is_the_wrong_type(slack: FakeSlack) -> None:
    """An app-level token is refused with not_allowed_token_type, as for every method."""
    with pytest.raises(SlackApiError) as refused:
        await client(slack, APP_TOKEN).assistant_search_context(
            query="launch", action_token=grant_action_token(ADA, "T1")
        )
    assert refused.value.response["error"] == "not_allowed_token_type"


async def test_a_channel_type_whose_scope_is_not_granted_is_missing_scope(
    slack: FakeSlack,
) -> None:
    """With only search:read.public granted, asking for private channels names the scope."""
    slack.granted_scopes = ["search:read.public", "chat:write"]
    token = grant_action_token(ADA, "T1")
    assert (await search(slack, query="launch", action_token=token))["ok"] is True
    with pytest.raises(SlackApiError) as refused:
        await search(slack, query="launch", action_token=token, channel_types=ALL_TYPES)
    assert refused.value.response["error"] == "missing_scope"
    assert refused.value.response["needed"] == "search:read.private"


async def test_ratelimited_is_a_429_with_retry_after(slack: FakeSlack) -> None:
    """A queued rate limit answers 429, `ratelimited` and Retry-After."""
    slack.rate_limit("assistant.search.context", retry_after=30)
    with pytest.raises(SlackApiError) as refused:
        await search(slack, query="launch", action_token=grant_action_token(ADA, "T1"))
    response = refused.value.response
    assert (response.status_code, response["error"]) == (429, "ratelimited")
    assert response.headers["Retry-After"] == "30"


async def test_pages_follow_the_cursor_and_the_limit_is_bounded(slack: FakeSlack) -> None:
    """limit=1 gives one message and a cursor to the next; past 20 is invalid_arguments."""
    for n in range(3):
        slack.seed_message(LAUNCH, new_ts(), ADA, f"launch note {n}")
    token = grant_action_token(ADA, "T1")
    first = await search(slack, query="launch", action_token=token, limit=1, sort="timestamp")
    cursor = first["response_metadata"]["next_cursor"]
    second = await search(
        slack, query="launch", action_token=token, limit=1, sort="timestamp", cursor=cursor
    )
    texts = [p["results"]["messages"][0]["content"] for p in (first, second)]
    assert texts == ["launch note 2", "launch note 1"]
    with pytest.raises(SlackApiError) as refused:
        await search(slack, query="launch", action_token=token, limit=21)
    assert refused.value.response["error"] == "invalid_arguments"
