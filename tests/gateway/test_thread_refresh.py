"""Refresh on re-mention (issue 43, item 4): a mention in a thread the bot knows reads only
what is newer than the last stored message, within the same paced budget — and nothing at
all while the thread's messages kept arriving as events."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    app_mention_event,
    event_callback,
    message_event,
    new_ts,
)
from tests.gateway.rig import Rig

REPLIES = "conversations.replies"
USERS = {DEFAULT_USER: "Ada", "U0BOB00001": "Bob"}


def user_texts(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m.get("role") == "user"]


async def mention(rig: Rig, text: str, ts: str, thread_ts: str | None = None) -> None:
    rig.slack.seed_message(DEFAULT_CHANNEL, ts, DEFAULT_USER, text, thread_ts=thread_ts)
    event = app_mention_event(text=text, ts=ts, thread_ts=thread_ts)
    assert (await rig.send(event_callback(event)))[0] == 200


@pytest.mark.rig(overrides={"THREADGATE_CONTINUE_THREADS": "false"}, users=USERS)
async def test_a_re_mention_reads_only_what_is_newer_than_the_store(rig: Rig) -> None:
    """Without channel message events, each re-mention asks Slack for the thread after
    the last message stored (`oldest`): the replies written since reach the model, each
    once, and the next re-mention starts after them."""
    root, first, second, again, last = (new_ts() for _ in range(5))
    await mention(rig, "<@UBOT> plan the launch", root)
    await rig.slack.wait_for_posts(1)
    rig.slack.seed_message(DEFAULT_CHANNEL, first, "U0BOB00001", "Friday works", root)
    rig.slack.seed_message(DEFAULT_CHANNEL, second, "U0BOB00001", "no, Monday", root)
    await mention(rig, "<@UBOT> so when?", again, root)
    await rig.slack.wait_for_posts(2)
    users = user_texts(rig.model.requests[-1].body)
    assert [t for t in users if "Friday works" in t or "no, Monday" in t] == users[1:3]
    assert rig.slack.calls_to(REPLIES)[0].params["oldest"] == root
    await mention(rig, "<@UBOT> thanks", last, root)
    await rig.slack.wait_for_posts(3)
    assert rig.slack.calls_to(REPLIES)[1].params["oldest"] == again
    assert sum("Friday works" in t for t in user_texts(rig.model.requests[-1].body)) == 1


@pytest.mark.rig(users=USERS)
async def test_a_re_mention_reads_nothing_while_the_messages_arrived_as_events(rig: Rig) -> None:
    """With the thread's messages arriving as events (THREADGATE_CONTINUE_THREADS), the
    store is complete: a re-mention asks Slack nothing, and the model still sees what was
    said in between."""
    root, aside, again = new_ts(), new_ts(), new_ts()
    await mention(rig, "<@UBOT> plan the launch", root)
    await rig.slack.wait_for_posts(1)
    said = "<@U0A1B2C3D4E> Friday works for me"
    rig.slack.seed_message(DEFAULT_CHANNEL, aside, "U0BOB00001", said, root)
    event = message_event(text=said, ts=aside, thread_ts=root, user="U0BOB00001")
    assert (await rig.send(event_callback(event)))[0] == 200
    await mention(rig, "<@UBOT> so when?", again, root)
    await rig.slack.wait_for_posts(2)
    assert any("Friday works" in t for t in user_texts(rig.model.requests[-1].body))
    assert rig.slack.calls_to(REPLIES) == []
