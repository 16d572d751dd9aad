"""Tests of `FakeSlack`'s native streaming (chat.startStream/appendStream/stopStream).

The gateway's streamed replies are only proven by tests against the fake if the fake refuses
what Slack refuses and keeps what Slack keeps; these tests drive it with the real
`AsyncWebClient`, its `chat_stream` helper included, and check each rule of the module
docstring of tests/fakes/slack_api.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator
from slack_sdk.models.messages.chunk import MarkdownTextChunk, PlanUpdateChunk, TaskUpdateChunk
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.slack_response import SlackResponse

from .slack_api import FakeSlack
from .slack_events import new_ts
from .slack_streams import Stream, check_payload

TOKEN = "xoxb-test"
CHANNEL = "C0A1B2C3D4E"
DM = "D0A1B2C3D4E"
USER = "U0A1B2C3D4E"
TEAM = "T1"
RECIPIENT = {"recipient_user_id": USER, "recipient_team_id": TEAM}
METADATA = {"event_type": "threadgate_outbox", "event_payload": {"outbox_id": "task:1:reply"}}


class Clock:
    """A monotonic clock the test moves by hand, so expiry needs no waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token=TOKEN, bot_user_id="UBOT", team_id=TEAM) as fake:
        yield fake


def client_for(slack: FakeSlack, *handlers: AsyncConnectionErrorRetryHandler) -> AsyncWebClient:
    return AsyncWebClient(token=TOKEN, base_url=slack.url, retry_handlers=list(handlers))


def thread_in(slack: FakeSlack, channel: str = CHANNEL) -> str:
    parent = new_ts()
    slack.seed_message(channel, parent, USER, "<@UBOT> explain")
    return parent


async def start(client: AsyncWebClient, thread_ts: str, **arguments: Any) -> str:
    arguments = {"channel": CHANNEL, **RECIPIENT, **arguments}
    response = await client.chat_startStream(thread_ts=thread_ts, **arguments)
    return str(response["ts"])


async def refusal(call: Awaitable[object]) -> SlackResponse:
    """The response a client call is refused with (SlackApiError)."""
    with pytest.raises(SlackApiError) as caught:
        await call
    response: SlackResponse = caught.value.response
    return response


async def error_of(call: Awaitable[object]) -> str:
    """The Slack error code a client call is refused with."""
    return str((await refusal(call))["error"])


async def test_channel_stream_needs_both_recipients_and_a_dm_needs_none(slack: FakeSlack) -> None:
    """In a channel a start without recipient_user_id or recipient_team_id is refused with
    Slack's code and creates nothing; in a DM the same start streams."""
    client, parent = client_for(slack), thread_in(slack)
    no_user = client.chat_startStream(channel=CHANNEL, thread_ts=parent, markdown_text="hi")
    assert await error_of(no_user) == "missing_recipient_user_id"
    no_team = client.chat_startStream(
        channel=CHANNEL, thread_ts=parent, markdown_text="hi", recipient_user_id=USER
    )
    assert await error_of(no_team) == "missing_recipient_team_id"
    assert slack.streams == [] and slack.visible_thread(CHANNEL, parent) == []

    dm_parent = thread_in(slack, DM)
    response = await client.chat_startStream(channel=DM, thread_ts=dm_parent, markdown_text="hi")
    view = slack.stream(DM, response["ts"])
    assert (view.text, view.recipient_user_id, view.recipient_team_id) == ("hi", None, None)


async def test_start_without_thread_ts_is_invalid_arguments(slack: FakeSlack) -> None:
    """thread_ts is required: without it the answer names the missing field."""
    with pytest.raises(SlackApiError) as caught:
        await client_for(slack).api_call(
            "chat.startStream", json={"channel": DM, "markdown_text": "hi"}
        )
    response = caught.value.response
    assert response["error"] == "invalid_arguments"
    assert "thread_ts" in response["response_metadata"]["messages"][0]
    assert slack.streams == []


async def test_streaming_message_is_visible_in_replies_with_the_text_so_far(
    slack: FakeSlack,
) -> None:
    """A started stream is a bot message in the thread at once, and conversations.replies
    shows what has been appended so far while it still streams."""
    client, parent = client_for(slack), thread_in(slack)
    ts = await start(client, parent, markdown_text="Hel")
    await client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="lo")

    replies = (await client.conversations_replies(channel=CHANNEL, ts=parent))["messages"]
    assert [m["ts"] for m in replies] == [parent, ts]
    reply = replies[1]
    assert (reply["text"], reply["user"], reply["bot_id"]) == ("Hello", "UBOT", slack.bot_id)
    assert reply["thread_ts"] == parent
    view = slack.stream(CHANNEL, ts)
    assert (view.state, view.thread_ts, view.recipient_user_id) == ("streaming", parent, USER)


async def test_stop_finalises_text_and_metadata_round_trips_like_a_post(slack: FakeSlack) -> None:
    """chat.stopStream's text joins the streamed text and its metadata comes back from
    conversations.replies only with include_all_metadata, as for chat.postMessage."""
    client, parent = client_for(slack), thread_in(slack)
    ts = await start(client, parent, markdown_text="**All** ")
    await client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="done")
    blocks = [{"type": "context", "elements": [{"type": "mrkdwn", "text": "by threadgate"}]}]
    await client.chat_stopStream(
        channel=CHANNEL, ts=ts, markdown_text=".", metadata=METADATA, blocks=blocks
    )

    with_metadata = await client.conversations_replies(
        channel=CHANNEL, ts=parent, include_all_metadata=True
    )
    final = with_metadata["messages"][-1]
    assert (final["text"], final["metadata"], final["blocks"]) == (
        "**All** done.",
        METADATA,
        blocks,
    )
    plain = await client.conversations_replies(channel=CHANNEL, ts=parent)
    assert "metadata" not in plain["messages"][-1]
    view = slack.stream(CHANNEL, ts)
    assert (view.state, view.stopped_by, view.metadata) == ("stopped", "app", METADATA)
    assert slack.visible_thread(CHANNEL, parent) == ["**All** done."]


async def test_append_or_stop_after_stop_and_to_other_messages_get_slacks_errors(
    slack: FakeSlack,
) -> None:
    """A stopped stream, a posted message, a user's message and an unknown ts each get the
    error Slack gives for them, and none of them changes."""
    client, parent = client_for(slack), thread_in(slack)
    ts = await start(client, parent, markdown_text="one")
    await client.chat_stopStream(channel=CHANNEL, ts=ts)
    posted = (await client.chat_postMessage(channel=CHANNEL, thread_ts=parent, text="p"))["ts"]

    cases = [
        (ts, "message_not_in_streaming_state"),
        (posted, "message_not_in_streaming_state"),
        (parent, "message_not_owned_by_app"),
        ("1600000000.000001", "message_not_found"),
    ]
    for target, error in cases:
        append = client.chat_appendStream(channel=CHANNEL, ts=target, markdown_text="more")
        assert await error_of(append) == error
        assert await error_of(client.chat_stopStream(channel=CHANNEL, ts=target)) == error
    assert slack.visible_thread(CHANNEL, parent) == ["one", "p"]


async def test_markdown_over_12000_characters_is_msg_too_long(slack: FakeSlack) -> None:
    """12,000 characters pass; 12,001 in markdown_text or in one markdown chunk answer
    msg_too_long on start, append and stop, and nothing is appended."""
    client, parent = client_for(slack), thread_in(slack)
    long, limit = "a" * 12_001, "b" * 12_000
    assert await error_of(start(client, parent, markdown_text=long)) == "msg_too_long"
    ts = await start(client, parent, markdown_text=limit)
    chunk_ts = await start(client, parent, chunks=[{"type": "markdown_text", "text": "c"}])

    refused = [
        client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text=long),
        client.chat_stopStream(channel=CHANNEL, ts=ts, markdown_text=long),
        client.chat_appendStream(
            channel=CHANNEL, ts=chunk_ts, chunks=[{"type": "markdown_text", "text": long}]
        ),
    ]
    for call in refused:
        assert await error_of(call) == "msg_too_long"
    assert slack.stream(CHANNEL, ts).text == limit
    assert slack.stream(CHANNEL, chunk_ts).text == "c"


async def test_empty_append_and_both_payloads_are_refused(slack: FakeSlack) -> None:
    """An append with no text and no chunks, or with an empty list, answers
    markdown_text_or_chunks_required; text and chunks together are refused everywhere."""
    client, parent = client_for(slack), thread_in(slack)
    ts = await start(client, parent, markdown_text="x")
    empties: list[dict[str, Any]] = [{}, {"markdown_text": ""}, {"chunks": []}]
    for empty in empties:
        append = client.chat_appendStream(channel=CHANNEL, ts=ts, **empty)
        assert await error_of(append) == "markdown_text_or_chunks_required"
    both: dict[str, Any] = {
        "markdown_text": "y",
        "chunks": [{"type": "markdown_text", "text": "z"}],
    }
    for call in (
        start(client, parent, **both),
        client.chat_appendStream(channel=CHANNEL, ts=ts, **both),
        client.chat_stopStream(channel=CHANNEL, ts=ts, **both),
    ):
        assert await error_of(call) == "cannot_provide_both_markdown_text_and_chunks"
    assert slack.stream(CHANNEL, ts).text == "x"


async def test_a_stream_keeps_the_mode_it_was_opened_in(slack: FakeSlack) -> None:
    """A stream opened with markdown_text refuses chunks and one opened with chunks refuses
    markdown_text (streaming_mode_mismatch); one opened empty takes either."""
    client, parent = client_for(slack), thread_in(slack)
    text_ts = await start(client, parent, markdown_text="t")
    chunk_ts = await start(client, parent, chunks=[{"type": "markdown_text", "text": "c"}])
    mismatches = [
        client.chat_appendStream(
            channel=CHANNEL, ts=text_ts, chunks=[{"type": "markdown_text", "text": "!"}]
        ),
        client.chat_appendStream(channel=CHANNEL, ts=chunk_ts, markdown_text="!"),
    ]
    for call in mismatches:
        assert await error_of(call) == "streaming_mode_mismatch"
    empty_ts = await start(client, parent)
    await client.chat_appendStream(channel=CHANNEL, ts=empty_ts, markdown_text="late")
    assert slack.stream(CHANNEL, empty_ts).text == "late"


MALFORMED_CHUNKS: list[Any] = [
    {"type": "markdown_text"},
    {"type": "markdown_text", "text": 7},
    {"type": "task_update", "id": "t1", "title": "Search", "status": "completed"},
    {"type": "task_update", "title": "Search", "status": "pending"},
    {"type": "task_update", "id": "t1", "status": "pending"},
    {"type": "task_update", "id": "t1", "title": "Search", "status": "pending", "note": "x"},
    {"type": "task_update", "id": "t1", "title": "S", "status": "complete", "output": 3},
    {"type": "task_update", "id": "t1", "title": "S", "status": "complete", "sources": [{}]},
    {"type": "plan_update"},
    {"type": "plan_update", "title": ""},
    {"type": "thinking", "text": "hm"},
    {"text": "no type"},
    "markdown",
]


@pytest.mark.parametrize("chunk", MALFORMED_CHUNKS)
async def test_malformed_chunks_are_invalid_chunks(slack: FakeSlack, chunk: Any) -> None:
    """Chunks with a missing, mistyped or unknown field, type or status answer invalid_chunks
    on start and on append, and leave the stream as it was."""
    client, parent = client_for(slack), thread_in(slack)
    good = {"type": "markdown_text", "text": "ok"}
    assert await error_of(start(client, parent, chunks=[good, chunk])) == "invalid_chunks"
    ts = await start(client, parent, chunks=[good])
    append = client.chat_appendStream(channel=CHANNEL, ts=ts, chunks=[chunk])
    assert await error_of(append) == "invalid_chunks"
    assert len(slack.streams) == 1 and slack.streams[0].chunks == (good,)


async def test_blocks_chunk_with_bad_blocks_is_invalid_blocks(slack: FakeSlack) -> None:
    """A blocks chunk is checked like chat.postMessage's blocks."""
    client, parent = client_for(slack), thread_in(slack)
    ok = {"type": "blocks", "blocks": [{"type": "divider"}]}
    ts = await start(client, parent, chunks=[ok])
    bad = {"type": "blocks", "blocks": [{"text": "no type"}]}
    append = client.chat_appendStream(channel=CHANNEL, ts=ts, chunks=[bad])
    assert await error_of(append) == "invalid_blocks"
    assert slack.stream(CHANNEL, ts).chunks == (ok,)


async def test_task_cards_keep_latest_status_history_and_plan_title(slack: FakeSlack) -> None:
    """Task updates are kept per id with their latest title, status and output, the list of
    statuses they went through, and appended details; plan_update sets the plan's title."""
    client, parent = client_for(slack), thread_in(slack)
    source = {"type": "url", "url": "https://example.com/a", "text": "A"}
    ts = await start(
        client,
        parent,
        task_display_mode="plan",
        chunks=[
            PlanUpdateChunk(title="Answering"),
            TaskUpdateChunk(id="t1", title="Search", status="pending"),
            TaskUpdateChunk(id="t2", title="Write", status="pending"),
        ],
    )
    await client.chat_appendStream(
        channel=CHANNEL,
        ts=ts,
        chunks=[
            TaskUpdateChunk(id="t1", title="Search", status="in_progress", details="one "),
            TaskUpdateChunk(id="t1", title="Searched", status="complete", details="two"),
            MarkdownTextChunk(text="Found it."),
        ],
    )
    await client.chat_stopStream(
        channel=CHANNEL,
        ts=ts,
        chunks=[
            {"type": "task_update", "id": "t2", "title": "Write", "status": "error"},
            {"type": "task_update", "id": "t1", "title": "Searched", "status": "complete"}
            | {"output": "3 hits", "sources": [source]},
            {"type": "plan_update", "title": "Answered"},
        ],
    )

    view = slack.stream(CHANNEL, ts)
    t1, t2 = view.tasks["t1"], view.tasks["t2"]
    assert (t1.title, t1.status, t1.details, t1.output) == (
        "Searched",
        "complete",
        "one two",
        "3 hits",
    )
    assert t1.history == ("pending", "in_progress", "complete", "complete")
    assert t1.sources == (source,)
    assert (t2.status, t2.history) == ("error", ("pending", "error"))
    assert (view.plan_title, view.task_display_mode, view.text) == ("Answered", "plan", "Found it.")
    assert len(view.chunks) == 9


async def test_unknown_task_display_mode_is_refused(slack: FakeSlack) -> None:
    """task_display_mode takes Slack's values only; the default is timeline."""
    client, parent = client_for(slack), thread_in(slack)
    assert await error_of(start(client, parent, task_display_mode="grid")) == "invalid_arguments"
    ts = await start(client, parent, markdown_text="x")
    assert slack.stream(CHANNEL, ts).task_display_mode == "timeline"


async def test_chat_stream_helper_buffers_then_flushes_through_the_fake(slack: FakeSlack) -> None:
    """slack-sdk's chat_stream helper starts the stream once its buffer fills, appends the
    next full buffer, and stop sends the rest with metadata: the text arrives whole."""
    client, parent = client_for(slack), thread_in(slack)
    streamer = await client.chat_stream(
        channel=CHANNEL, thread_ts=parent, buffer_size=10, **RECIPIENT
    )
    for piece in ("Hello", ", wor", "ld! ", "How are", " you?"):
        await streamer.append(markdown_text=piece)
    assert [c.method for c in slack.calls] == ["chat.startStream", "chat.appendStream"]
    await streamer.stop(markdown_text=" Bye.", metadata=METADATA)

    [view] = slack.streams
    assert view.ts == streamer.ts and view.state == "stopped"
    assert view.text == "Hello, world! How are you? Bye."
    assert view.metadata == METADATA
    assert slack.visible_thread(CHANNEL, parent) == ["Hello, world! How are you? Bye."]


async def test_chat_stream_helper_stop_on_an_empty_buffer_starts_then_stops(
    slack: FakeSlack,
) -> None:
    """The helper's stop before any flush starts an empty stream, then stops it with the
    buffered text as chunks: the fake accepts that sequence."""
    client, parent = client_for(slack), thread_in(slack)
    streamer = await client.chat_stream(channel=DM, thread_ts=parent, buffer_size=1000)
    await streamer.append(markdown_text="short")
    await streamer.stop()
    assert [c.method for c in slack.calls] == ["chat.startStream", "chat.stopStream"]
    assert [(s.text, s.state) for s in slack.streams] == [("short", "stopped")]


async def test_refuse_streaming_per_channel_and_per_workspace(slack: FakeSlack) -> None:
    """refuse_streaming makes the stream methods answer channel_type_not_supported (or the
    given code) in one channel or everywhere, while chat.postMessage still posts."""
    client, parent = client_for(slack), thread_in(slack)
    ts = await start(client, parent, markdown_text="before")
    slack.refuse_streaming(CHANNEL)
    assert await error_of(start(client, parent)) == "channel_type_not_supported"
    append = client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="x")
    assert await error_of(append) == "channel_type_not_supported"
    dm_parent = thread_in(slack, DM)
    assert (await client.chat_startStream(channel=DM, thread_ts=dm_parent))["ok"]

    slack.refuse_streaming(error="feature_not_enabled")
    dm_start = client.chat_startStream(channel=DM, thread_ts=dm_parent)
    assert await error_of(dm_start) == "feature_not_enabled"
    assert (await client.chat_postMessage(channel=CHANNEL, thread_ts=parent, text="fallback"))["ok"]
    slack.allow_streaming()
    slack.allow_streaming(CHANNEL)
    await client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text=" after")
    assert slack.visible_thread(CHANNEL, parent) == ["before after", "fallback"]


async def test_rate_limit_and_refusal_faults_do_nothing(slack: FakeSlack) -> None:
    """A 429 on chat.appendStream and a scripted refusal of chat.stopStream reach the
    client and append nothing; the next calls are answered normally."""
    client, parent = client_for(slack), thread_in(slack)
    ts = await start(client, parent, markdown_text="a")
    slack.rate_limit("chat.appendStream", retry_after=3)
    limited = await refusal(client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="b"))
    assert (limited.status_code, limited.headers["Retry-After"]) == (429, "3")
    slack.refuse("chat.stopStream", "internal_error")
    assert await error_of(client.chat_stopStream(channel=CHANNEL, ts=ts)) == "internal_error"
    assert slack.stream(CHANNEL, ts).state == "streaming"
    await client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="c")
    await client.chat_stopStream(channel=CHANNEL, ts=ts)
    assert slack.stream(CHANNEL, ts).text == "ac"
    faults = [c.fault for c in slack.calls if c.method.endswith("Stream")]
    assert faults == [None, "ratelimited", "refused", None, None]


async def test_append_that_fails_after_recording_still_lands(slack: FakeSlack) -> None:
    """fail_after_recording appends and then answers 500; drop_after_recording appends and
    cuts the connection, and slack-sdk's connection retry then appends the text twice:
    appends are not idempotent."""
    client, parent = client_for(slack), thread_in(slack)
    ts = await start(client, parent, markdown_text="a")
    slack.fail_after_recording("chat.appendStream", status=503)
    failed = await refusal(client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="b"))
    assert failed.status_code == 503
    slack.drop_after_recording("chat.appendStream")
    no_wait = FixedValueRetryIntervalCalculator(0)
    retrying = client_for(slack, AsyncConnectionErrorRetryHandler(1, interval_calculator=no_wait))
    await retrying.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="c")
    assert slack.stream(CHANNEL, ts).text == "abcc"


async def test_held_stop_leaves_the_stream_streaming_until_released(slack: FakeSlack) -> None:
    """A held chat.stopStream is recorded on arrival and stops the stream only once set."""
    client, parent = client_for(slack), thread_in(slack)
    ts = await start(client, parent, markdown_text="a")
    gate = slack.hold("chat.stopStream")
    stop = asyncio.create_task(client.chat_stopStream(channel=CHANNEL, ts=ts))
    await slack.wait_until(lambda: bool(slack.calls_to("chat.stopStream")), timeout=5)
    assert slack.stream(CHANNEL, ts).state == "streaming"
    gate.set()
    assert (await stop)["ok"] is True
    assert (await slack.wait_for_streams(1, stopped=True, timeout=5))[0].state == "stopped"


async def test_update_waits_for_the_stream_to_stop_and_delete_removes_it(
    slack: FakeSlack,
) -> None:
    """chat.update of a streaming message answers streaming_state_conflict and changes
    nothing; after the stop it edits the text. chat.delete removes a streamed message from
    the thread, ends a running stream, and refuses a user's message."""
    client, parent = client_for(slack), thread_in(slack)
    ts = await start(client, parent, markdown_text="draft")
    update = client.chat_update(channel=CHANNEL, ts=ts, text="edited")
    assert await error_of(update) == "streaming_state_conflict"
    await client.chat_stopStream(channel=CHANNEL, ts=ts)
    await client.chat_update(channel=CHANNEL, ts=ts, text="edited")
    assert slack.visible_thread(CHANNEL, parent) == ["edited"]
    assert slack.stream(CHANNEL, ts).text == "draft"

    running = await start(client, parent, markdown_text="going")
    await client.chat_delete(channel=CHANNEL, ts=running)
    await client.chat_delete(channel=CHANNEL, ts=ts)
    assert slack.visible_thread(CHANNEL, parent) == []
    replies = await client.conversations_replies(channel=CHANNEL, ts=parent)
    assert [m["ts"] for m in replies["messages"]] == [parent]
    view = slack.stream(CHANNEL, running)
    assert (view.state, view.stopped_by, view.deleted) == ("stopped", "delete", True)
    append = client.chat_appendStream(channel=CHANNEL, ts=running, markdown_text="x")
    assert await error_of(append) == "message_not_found"
    assert await error_of(client.chat_delete(channel=CHANNEL, ts=parent)) == "cant_delete_message"


async def test_user_stop_answers_stopped_by_user(slack: FakeSlack) -> None:
    """After the reader pressed Stop, appends and stops answer stopped_by_user."""
    client, parent = client_for(slack), thread_in(slack)
    ts = await start(client, parent, markdown_text="a")
    slack.stop_stream_as_user(CHANNEL, ts)
    append = client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="b")
    assert await error_of(append) == "stopped_by_user"
    assert await error_of(client.chat_stopStream(channel=CHANNEL, ts=ts)) == "stopped_by_user"
    assert slack.stream(CHANNEL, ts).stopped_by == "user"


async def test_idle_streams_expire_when_asked_and_never_by_default() -> None:
    """With stream_expiry a stream not written to for that long is stopped (each append
    restarts the count); with stream_expiry_from="start" it ends that long after it began;
    without it a stream whose writer died stays streaming."""
    clock = Clock()
    idle = FakeSlack(stream_expiry=300, clock=clock)
    aged = FakeSlack(stream_expiry=300, stream_expiry_from="start", clock=clock)
    never = FakeSlack(clock=clock)
    async with idle, aged, never:
        streams = []
        for fake in (idle, aged, never):
            client, parent = client_for(fake), thread_in(fake)
            streams.append((fake, client, await start(client, parent, markdown_text="a")))
        clock.now += 299
        for _, client, ts in streams[:2]:
            await client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text="b")
        clock.now += 2
        (_, idle_client, idle_ts), (_, aged_client, aged_ts) = streams[:2]
        await idle_client.chat_appendStream(channel=CHANNEL, ts=idle_ts, markdown_text="c")
        append = aged_client.chat_appendStream(channel=CHANNEL, ts=aged_ts, markdown_text="c")
        assert await error_of(append) == "message_not_in_streaming_state"
        clock.now += 300
        append = idle_client.chat_appendStream(channel=CHANNEL, ts=idle_ts, markdown_text="d")
        assert await error_of(append) == "message_not_in_streaming_state"
        clock.now += 86_400
        views = [fake.stream(CHANNEL, ts) for fake, _, ts in streams]
    assert [(v.state, v.stopped_by, v.text) for v in views] == [
        ("stopped", "expiry", "abc"),
        ("stopped", "expiry", "ab"),
        ("streaming", None, "a"),
    ]


async def test_wait_for_streams_times_out_listing_the_streams(slack: FakeSlack) -> None:
    """wait_for_streams fails with an AssertionError that shows the streams seen so far."""
    client, parent = client_for(slack), thread_in(slack)
    await start(client, parent, markdown_text="half an answer")
    assert len(await slack.wait_for_streams(1, timeout=1)) == 1
    with pytest.raises(AssertionError) as caught:
        await slack.wait_for_streams(1, stopped=True, timeout=0.05)
    message = str(caught.value)
    assert "1 stopped stream(s)" in message and "'half an answer'" in message
    assert "[streaming]" in message


async def test_form_encoded_chunks_are_decoded(slack: FakeSlack) -> None:
    """chunks sent form-encoded as a JSON string are read like a JSON body's."""
    parent = thread_in(slack, DM)
    form = {
        "channel": DM,
        "thread_ts": parent,
        "chunks": json.dumps([{"type": "markdown_text", "text": "form"}]),
    }
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with session.post(f"{slack.url}chat.startStream", data=form, headers=headers) as r:
            assert (await r.json())["ok"] is True
    assert slack.streams[0].text == "form"


async def test_visible_thread_shows_posted_and_streamed_messages_in_order(
    slack: FakeSlack,
) -> None:
    """visible_thread lists the bot's posted and streamed replies by ts with their current
    text; thread() still lists only what was posted."""
    client, parent = client_for(slack), thread_in(slack)
    await client.chat_postMessage(channel=CHANNEL, thread_ts=parent, text="working on it")
    ts = await start(client, parent, markdown_text="streamed")
    await client.chat_postMessage(channel=CHANNEL, thread_ts=parent, text="after")
    await client.chat_appendStream(channel=CHANNEL, ts=ts, markdown_text=" answer")
    assert slack.visible_thread(CHANNEL, parent) == ["working on it", "streamed answer", "after"]
    assert slack.thread(CHANNEL, parent) == ["working on it", "after"]
    await client.chat_postMessage(channel=CHANNEL, text="top level")
    assert slack.visible_thread(CHANNEL, None) == ["top level"]


@given(st.lists(st.text(max_size=40), max_size=8), st.booleans())
def test_streamed_text_is_the_concatenation_of_what_was_appended(
    pieces: list[str], as_chunks: bool
) -> None:
    """Whatever markdown arrives, as arguments or as chunks, the message text is all of it
    in order."""
    message = {"ts": "1700000000.000002", "text": ""}
    stream = Stream(message, CHANNEL, "1700000000.000001", "timeline", None, None, 0.0, 0.0)
    for piece in pieces:
        payload: dict[str, Any] = (
            {"chunks": [{"type": "markdown_text", "text": piece}]}
            if as_chunks
            else {"markdown_text": piece}
        )
        assert check_payload(payload, need_content=False) is None
        stream.write(payload, 0.0)
    assert stream.view().text == "".join(pieces) == message["text"]


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(["type", "text", "id", "title", "status", "sources", "x"]),
                inner,
                max_size=5,
            )
        ),
        max_leaves=12,
    )
)
def test_any_chunks_payload_gets_an_answer_not_a_crash(chunks: Any) -> None:
    """Arbitrary JSON as `chunks` is either accepted or refused with a Slack error code."""
    assert check_payload({"chunks": chunks}, need_content=False) in (
        None,
        "invalid_chunks",
        "msg_too_long",
    )
