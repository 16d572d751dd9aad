"""Store first (issue 43, item 1): every person's message the app receives is kept, as the
model reads it, those not addressed to the bot too; context is read from the store, and
Slack is asked only for what was never seen; edits and deletions follow the kept copy."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    app_mention_event,
    event_callback,
    message_changed_event,
    message_deleted_event,
    message_event,
    new_ts,
)
from tests.gateway.rig import Rig

pytestmark = pytest.mark.rig(users={DEFAULT_USER: "Ada", "U0BOB00001": "Bob"})
REPLIES = "conversations.replies"


async def said(
    rig: Rig, text: str, *, ts: str, thread_ts: str | None = None, user: str = DEFAULT_USER
) -> None:
    """Someone writes in the channel: Slack holds it, and (subscribed) sends its event."""
    rig.slack.seed_message(DEFAULT_CHANNEL, ts, user, text, thread_ts=thread_ts)
    event = message_event(text=text, ts=ts, thread_ts=thread_ts, user=user)
    status, _ = await rig.send(event_callback(event))
    assert status == 200


async def kept(rig: Rig) -> dict[str, str]:
    rows = await rig.db.pool.fetch("SELECT ts, text FROM slack_messages")
    return {r["ts"]: r["text"] for r in rows}


def user_texts(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m.get("role") == "user"]


async def test_a_message_not_addressed_to_the_bot_is_kept_and_not_answered(rig: Rig) -> None:
    """Channel chatter is kept rendered in its provenance tag, with a pasted credential
    redacted, and costs no model request."""
    ts = new_ts()
    await said(rig, "lunch? my key is sk-ant-api03-" + "a" * 90, ts=ts)
    text = (await kept(rig))[ts]
    assert text.startswith('<turn from="Ada" id="U0A1B2C3D4E"') and "lunch?" in text
    assert "sk-ant-api03" not in text
    assert rig.model.requests == [] and await rig.count("tasks") == 0


async def test_a_first_mention_in_a_thread_seen_from_its_start_reads_no_slack(rig: Rig) -> None:
    """A thread whose root and replies arrived as events is back-filled from the store:
    its earlier messages reach the model as turns, and Slack is not asked."""
    root, reply, mention = new_ts(), new_ts(), new_ts()
    await said(rig, "the plan is to ship on Friday", ts=root)
    await said(rig, "I disagree", ts=reply, thread_ts=root, user="U0BOB00001")
    rig.slack.seed_message(DEFAULT_CHANNEL, mention, DEFAULT_USER, "<@UBOT> summarize", root)
    await rig.send(
        event_callback(app_mention_event(text="<@UBOT> summarize", ts=mention, thread_ts=root))
    )
    await rig.slack.wait_for_posts(1)
    users = user_texts(rig.model.requests[0].body)
    assert len(users) == 3 and "ship on Friday" in users[0] and "I disagree" in users[1]
    assert 'from="Bob"' in users[1] and "summarize" in users[2]
    assert rig.slack.calls_to(REPLIES) == []


async def test_a_reply_to_someone_else_in_a_known_thread_is_context_for_the_next_answer(
    rig: Rig,
) -> None:
    """A reply addressed to someone else is not answered, but the next answer in the
    thread sees it, in its place, as that person's turn."""
    root = new_ts()
    rig.slack.seed_message(DEFAULT_CHANNEL, root, DEFAULT_USER, "<@UBOT> hi")
    await rig.send(event_callback(app_mention_event(text="<@UBOT> hi", ts=root)))
    await rig.slack.wait_for_posts(1)
    aside = new_ts()
    await said(
        rig, "<@U0A1B2C3D4E> did you see the numbers?", ts=aside, thread_ts=root, user="U0BOB00001"
    )
    assert len(rig.model.requests) == 1
    again = new_ts()
    await rig.send(
        event_callback(app_mention_event(text="<@UBOT> and now?", ts=again, thread_ts=root))
    )
    await rig.slack.wait_for_posts(2)
    users = user_texts(rig.model.requests[1].body)
    assert "did you see the numbers?" in users[-2] and 'from="Bob"' in users[-2]
    assert "and now?" in users[-1]


async def test_edits_and_deletions_follow_the_kept_copy(rig: Rig) -> None:
    """An edit of a message kept only as context re-renders its kept copy; its deletion
    deletes it."""
    ts = new_ts()
    await said(rig, "the launch is on Monday", ts=ts)
    edit = message_changed_event(
        ts=ts, new_text="the launch is on Tuesday", old_text="the launch is on Monday"
    )
    assert (await rig.send(event_callback(edit)))[0] == 200
    text = (await kept(rig))[ts]
    assert "Tuesday" in text and "Monday" not in text
    assert (await rig.send(event_callback(message_deleted_event(ts=ts))))[0] == 200
    assert ts not in await kept(rig)
