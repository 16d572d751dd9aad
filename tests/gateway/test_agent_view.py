"""Slack's agent messaging experience, end to end (issue 31, item 5): opening the DM with the
app offers the configured suggested prompts; every DM message is its own thread, and all of
them continue the DM's one conversation, its history from our store."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.slack_events import (
    DEFAULT_DM,
    app_home_opened_event,
    dm_message_event,
    event_callback,
)
from tests.gateway.rig import BOTH, Rig

PROMPTS = [{"title": "What can you do?", "message": "What can you help me with?"}, "Summarize"]

pytestmark = pytest.mark.rig(
    overrides={"THREADGATE_SUGGESTED_PROMPTS": json.dumps(PROMPTS)}, modes=BOTH
)


async def send(rig: Rig, envelope: dict[str, Any]) -> int:
    """Deliver the envelope the way the rig's gateway takes events; the ack's HTTP status."""
    if not rig.socket_mode:
        return (await rig.send(envelope))[0]
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(envelope))
    return 200


def user_turns(rig: Rig, request: int) -> str:
    messages = rig.model.requests[request].body["messages"]
    return "\n".join(str(m["content"]) for m in messages if m.get("role") == "user")


async def test_opening_the_dm_offers_the_suggested_prompts(rig: Rig) -> None:
    """The messages tab opened: the prompts are set for the DM, without a thread (Slack
    ignores a thread_ts there); the Home tab opened sets nothing."""
    assert await send(rig, event_callback(app_home_opened_event(tab="home"))) == 200
    assert await send(rig, event_callback(app_home_opened_event())) == 200
    await rig.slack.wait_until(lambda: bool(rig.slack.suggested_prompts), what="prompts")
    [offered] = rig.slack.suggested_prompts
    assert offered.channel_id == DEFAULT_DM
    assert list(offered.prompts) == [
        {"title": "What can you do?", "message": "What can you help me with?"},
        {"title": "Summarize", "message": "Summarize"},
    ]
    [call] = rig.slack.calls_to("assistant.threads.setSuggestedPrompts")
    assert "thread_ts" not in call.params


async def test_every_dm_message_is_a_thread_of_the_dms_one_conversation(rig: Rig) -> None:
    """Two DM messages are each answered in their own thread; a reply in the first one's
    thread sees both earlier exchanges, from our store, without reading the thread."""
    first = dm_message_event(text="my name is Ada")
    await send(rig, event_callback(first))
    await rig.slack.wait_for_posts(1)
    second = dm_message_event(text="I like tea")
    await send(rig, event_callback(second))
    posts = await rig.slack.wait_for_posts(2)
    assert [p.thread_ts for p in posts] == [first["ts"], second["ts"]]
    reply = dm_message_event(text="what do you know about me?", thread_ts=first["ts"])
    await send(rig, event_callback(reply))
    posts = await rig.slack.wait_for_posts(3)
    assert posts[2].thread_ts == first["ts"]
    seen = user_turns(rig, 2)
    assert "my name is Ada" in seen and "I like tea" in seen
    assert rig.slack.calls_to("conversations.replies") == []
    sessions = await rig.db.pool.fetch("SELECT DISTINCT session_id FROM tasks")
    assert [s["session_id"] for s in sessions] == [f"T1:{DEFAULT_DM}"]


@pytest.mark.rig(
    overrides={
        "THREADGATE_AGENT_VIEW": "false",
        "THREADGATE_SUGGESTED_PROMPTS": json.dumps(PROMPTS),
    }
)
async def test_with_the_assistant_experience_a_dm_thread_is_its_own_conversation(
    rig: Rig,
) -> None:
    """THREADGATE_AGENT_VIEW=false keeps the assistant experience: a DM thread is a
    conversation of its own, and opening the DM offers nothing."""
    first = dm_message_event(text="my name is Ada")
    await send(rig, event_callback(first))
    await rig.slack.wait_for_posts(1)
    reply = dm_message_event(text="and this thread?", thread_ts=first["ts"])
    await send(rig, event_callback(reply))
    await rig.slack.wait_for_posts(2)
    sessions = await rig.db.pool.fetch("SELECT session_id FROM tasks ORDER BY seq")
    assert [s["session_id"] for s in sessions] == [
        f"T1:{DEFAULT_DM}",
        f"T1:{DEFAULT_DM}:{first['ts']}",
    ]
    assert await send(rig, event_callback(app_home_opened_event())) == 200
    assert rig.slack.calls_to("assistant.threads.setSuggestedPrompts") == []
