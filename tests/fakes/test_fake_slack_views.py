"""The fake's modals and memberships, driven by the real slack-sdk client: views.open takes
a trigger once and only while it lives, checks the modal as Slack's reference says, and
answers the view with its id; the shortcut and submission payloads carry what Slack's do;
a bot outside a conversation is answered `is_member: false`, `not_in_channel` or
`channel_not_found`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from gateway.slack.shortcut import ask_modal, ask_submission, shortcut_press

from .slack_api import FakeSlack

TOKEN = "xoxb-test"
CHANNEL = "C0VIEWS0001"
TS = "1700000000.000100"
ASKER = "U0ASKER0001"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token=TOKEN) as fake:
        fake.seed_message(CHANNEL, TS, "U0AUTHOR001", "the quarterly numbers are in")
        yield fake


def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=slack.url)


async def refused(call: Any) -> dict[str, Any]:
    with pytest.raises(SlackApiError) as caught:
        await call
    return dict(caught.value.response.data)


async def test_a_press_opens_one_modal_and_its_submission_carries_what_was_typed(
    slack: FakeSlack,
) -> None:
    """The shortcut's payload names the message and a trigger; views.open with it answers
    the view with an id; the submission carries that id, the metadata and the text."""
    press = slack.views.press(CHANNEL, TS, user=ASKER)
    assert press["type"] == "message_action" and press["message"]["text"].startswith("the q")
    read = shortcut_press(press)
    opened = await client(slack).views_open(
        trigger_id=read.trigger_id, view=ask_modal(read.message)
    )
    view = opened["view"]
    assert view["id"].startswith("V") and view["root_view_id"] == view["id"]
    assert [v.user for v in slack.views.opened] == [ASKER]
    submission = ask_submission(slack.views.submit(view["id"], "Translate it"))
    assert (submission.view_id, submission.user, submission.request) == (
        view["id"],
        ASKER,
        "Translate it",
    )
    assert submission.message == read.message


async def test_a_trigger_opens_one_view_only_while_it_lives(slack: FakeSlack) -> None:
    """A trigger used once answers `exchanged_trigger_id`; one past its 3 s
    `expired_trigger_id`; one never issued `invalid_arguments`."""
    modal = ask_modal(shortcut_press(slack.views.press(CHANNEL, TS, user=ASKER)).message)
    used = slack.views.press(CHANNEL, TS, user=ASKER)["trigger_id"]
    await client(slack).views_open(trigger_id=used, view=modal)
    again = await refused(client(slack).views_open(trigger_id=used, view=modal))
    late = slack.views.press(CHANNEL, TS, user=ASKER)["trigger_id"]
    slack.views.expire(late)
    expired = await refused(client(slack).views_open(trigger_id=late, view=modal))
    unknown = await refused(client(slack).views_open(trigger_id="1.2.3", view=modal))
    assert again["error"] == "exchanged_trigger_id"
    assert expired["error"] == "expired_trigger_id"
    assert unknown["error"] == "invalid_arguments"
    assert len(slack.views.opened) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"title": {"type": "plain_text", "text": "x" * 25}},
        {"private_metadata": "x" * 3001},
        {"submit": None},
        {"blocks": [{"type": "image"}]},
    ],
    ids=["long-title", "long-metadata", "input-without-submit", "unknown-block"],
)
async def test_a_modal_slack_would_refuse_is_invalid_arguments(
    slack: FakeSlack, change: dict[str, Any]
) -> None:
    """A view past the reference's limits is refused and opens nothing."""
    press = shortcut_press(slack.views.press(CHANNEL, TS, user=ASKER))
    view = {k: v for k, v in (ask_modal(press.message) | change).items() if v is not None}
    answer = await refused(client(slack).views_open(trigger_id=press.trigger_id, view=view))
    assert answer["error"] == "invalid_arguments" and answer["response_metadata"]["messages"]
    assert slack.views.opened == []


async def test_a_bot_outside_a_public_channel_sees_it_but_cannot_post(slack: FakeSlack) -> None:
    """Out of a public channel: conversations.info says `is_member: false` and posts are
    `not_in_channel`; out of a private one, both are `channel_not_found`."""
    slack.membership.leave(CHANNEL)
    slack.membership.leave("G0PRIVATE01", private=True)
    info = await client(slack).conversations_info(channel=CHANNEL)
    assert info["channel"]["is_member"] is False
    post = await refused(client(slack).chat_postMessage(channel=CHANNEL, text="hi"))
    hidden = await refused(client(slack).conversations_info(channel="G0PRIVATE01"))
    assert (post["error"], hidden["error"]) == ("not_in_channel", "channel_not_found")
    assert slack.posts == []
