"""Tests of `FakeSlack`'s agent sessions and suggested prompts, driven by the real
`AsyncWebClient`: agents.sessions.setStatus (and its warning without the
`agent_session_stopped` subscription), chat.stopStream's `session_status`, the Stop button
(`press_stop`) and assistant.threads.setSuggestedPrompts, as Slack's reference describes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from .slack_api import NO_STOP_SUBSCRIPTION, FakeSlack
from .slack_events import new_ts

TOKEN = "xoxb-test"
CHANNEL = "C0A1B2C3D4E"
DM = "D0A1B2C3D4E"
RECIPIENT = {"recipient_user_id": "U0A1B2C3D4E", "recipient_team_id": "T1"}


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token=TOKEN, bot_user_id="UBOT", team_id="T1") as fake:
        yield fake


def client_for(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=slack.url, retry_handlers=[])


async def error_of(call: Awaitable[object]) -> str:
    with pytest.raises(SlackApiError) as caught:
        await call
    return str(caught.value.response["error"])


async def test_set_status_creates_and_changes_the_threads_session(slack: FakeSlack) -> None:
    """setStatus creates the session, then changes it; a status Slack does not know and a
    missing thread are refused."""
    client, thread = client_for(slack), new_ts()
    answer = await client.agents_sessions_setStatus(
        channel_id=CHANNEL, thread_ts=thread, status="processing"
    )
    assert answer.get("warning") is None
    await client.agents_sessions_setStatus(channel_id=CHANNEL, thread_ts=thread, status="active")
    assert [c.status for c in slack.session_changes] == ["processing", "active"]
    assert slack.session_status(CHANNEL, thread) == "active"
    bad = client.agents_sessions_setStatus(channel_id=CHANNEL, thread_ts=thread, status="busy")
    assert await error_of(bad) == "invalid_arguments"
    no_thread = client.agents_sessions_setStatus(channel_id=CHANNEL, status="active")
    assert await error_of(no_thread) == "invalid_arguments"


async def test_without_the_subscription_set_status_warns(slack: FakeSlack) -> None:
    """An app that does not subscribe to agent_session_stopped gets Slack's warning, and
    no Stop button can be pressed."""
    slack.stop_subscribed = False
    client, thread = client_for(slack), new_ts()
    answer = await client.agents_sessions_setStatus(
        channel_id=CHANNEL, thread_ts=thread, status="processing"
    )
    assert answer["warning"] == NO_STOP_SUBSCRIPTION
    with pytest.raises(AssertionError):
        slack.press_stop(CHANNEL, thread)


async def test_stop_stops_the_threads_streams_and_leaves_the_status_to_the_app(
    slack: FakeSlack,
) -> None:
    """Stop ends the thread's streams as the user (appends and stops then answer
    `stopped_by_user`) and changes no status by itself."""
    client, thread = client_for(slack), new_ts()
    await client.agents_sessions_setStatus(
        channel_id=CHANNEL, thread_ts=thread, status="processing"
    )
    started = await client.chat_startStream(
        channel=CHANNEL, thread_ts=thread, markdown_text="so far", **RECIPIENT
    )
    assert slack.press_stop(CHANNEL, thread) == [started["ts"]]
    append = client.chat_appendStream(channel=CHANNEL, ts=started["ts"], markdown_text="more")
    assert await error_of(append) == "stopped_by_user"
    stop = client.chat_stopStream(channel=CHANNEL, ts=started["ts"], markdown_text="all of it")
    assert await error_of(stop) == "stopped_by_user"
    assert slack.stream(CHANNEL, started["ts"]).text == "so far"
    assert slack.session_status(CHANNEL, thread) == "processing"


async def test_stop_stream_sets_the_session_status_it_is_given(slack: FakeSlack) -> None:
    """chat.stopStream's session_status (default active) sets the thread's session; a
    status Slack does not know is refused; a thread without a session gets none."""
    client, thread = client_for(slack), new_ts()
    await client.agents_sessions_setStatus(
        channel_id=CHANNEL, thread_ts=thread, status="processing"
    )
    plan = await client.chat_startStream(channel=CHANNEL, thread_ts=thread, **RECIPIENT)
    await client.chat_stopStream(channel=CHANNEL, ts=plan["ts"], session_status="processing")
    assert slack.session_status(CHANNEL, thread) == "processing"
    reply = await client.chat_startStream(channel=CHANNEL, thread_ts=thread, **RECIPIENT)
    bad = client.chat_stopStream(channel=CHANNEL, ts=reply["ts"], session_status="done")
    assert await error_of(bad) == "invalid_arguments"
    await client.chat_stopStream(channel=CHANNEL, ts=reply["ts"])
    assert slack.session_status(CHANNEL, thread) == "active"
    other = new_ts()
    alone = await client.chat_startStream(channel=CHANNEL, thread_ts=other, **RECIPIENT)
    await client.chat_stopStream(channel=CHANNEL, ts=alone["ts"])
    assert slack.session_status(CHANNEL, other) is None


async def test_suggested_prompts_for_the_dm_and_the_silent_thread_call(slack: FakeSlack) -> None:
    """Prompts set for a DM are kept; with the agent experience a call naming a thread_ts
    sets nothing (and says ok); more than four, or a malformed one, is refused."""
    client = client_for(slack)
    prompts = [{"title": "Hi", "message": "What can you do?"}]
    await client.assistant_threads_setSuggestedPrompts(channel_id=DM, prompts=prompts)
    await client.assistant_threads_setSuggestedPrompts(
        channel_id=DM, thread_ts=new_ts(), prompts=prompts
    )
    assert [(p.channel_id, list(p.prompts)) for p in slack.suggested_prompts] == [(DM, prompts)]
    five = client.assistant_threads_setSuggestedPrompts(channel_id=DM, prompts=prompts * 5)
    assert await error_of(five) == "invalid_arguments"
    untitled = client.assistant_threads_setSuggestedPrompts(
        channel_id=DM, prompts=[{"message": "x"}]
    )
    assert await error_of(untitled) == "invalid_arguments"
    slack.experience = "assistant"
    await client.assistant_threads_setSuggestedPrompts(
        channel_id=DM, thread_ts=new_ts(), prompts=prompts
    )
    assert len(slack.suggested_prompts) == 2
