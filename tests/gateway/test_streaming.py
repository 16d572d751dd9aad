"""Native streaming in Slack: a reply shows while the model writes it, an acknowledgment
shows its subtasks as live task cards, and every message still lands exactly once.

A real gateway (HTTP and Socket Mode alike) against the loopback fakes: the model streams
its answer over SSE, gated where a test needs it to stop half way; the fake Slack speaks
chat.startStream/appendStream/stopStream as tests/fakes/slack_streams.py describes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from agent.rounds.subagent import SUBAGENT_PROMPT
from tests.fakes.openai_api import (
    Completion,
    FakeToolCall,
    Gated,
    RecordedRequest,
    Reply,
    reply_with_tool,
)
from tests.fakes.slack_events import (
    DEFAULT_DM,
    DEFAULT_TEAM,
    DEFAULT_USER,
    app_mention_event,
    dm_message_event,
    event_callback,
)
from tests.gateway.rig import BOTH, STREAMING, Rig
from tests.pg import wait_for_task

ANSWER = (
    "Here is the answer, in **Markdown**.\n\nIt has two paragraphs & a <!here> that must not ping."
)


pytestmark = pytest.mark.rig(
    overrides={**STREAMING, "THREADGATE_SLACK_SETTLE_SECONDS": "0.2"}, modes=BOTH
)


async def send(rig: Rig, event: dict[str, Any]) -> int:
    """Deliver the event the way the rig's gateway takes events; the ack's HTTP status."""
    if not rig.socket_mode:
        return (await rig.send(event_callback(event)))[0]
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(event_callback(event)))
    return 200


async def test_a_reply_streams_while_it_is_written_then_ends_with_our_metadata(rig: Rig) -> None:
    """The first words show before the model has finished; the finished message is the
    reply exactly once, with the recipient Slack requires in a channel, and no post."""
    release = asyncio.Event()
    rig.model.script(Gated(reply_with_tool("final_reply", {"text": ANSWER}), release, before=12))
    event = app_mention_event(text="<@UBOT> explain")
    assert await send(rig, event) == 200
    [live] = await rig.slack.wait_for_streams(1)
    await rig.slack.wait_until(
        lambda: rig.slack.stream(live.channel, live.ts).text != "", 10, what="first words"
    )
    early = rig.slack.stream(live.channel, live.ts)
    assert early.state == "streaming" and ANSWER.startswith(early.text.replace("\u200d", ""))
    assert (early.recipient_user_id, early.recipient_team_id) == (DEFAULT_USER, DEFAULT_TEAM)
    release.set()
    [done] = await rig.slack.wait_for_streams(1, stopped=True)
    assert done.ts == live.ts and done.stopped_by == "app"
    task_id = f"{DEFAULT_TEAM}:{event['channel']}:{event['ts']}"
    assert done.metadata is not None
    assert done.metadata["event_payload"]["outbox_id"] == f"task:{task_id}:reply"
    await wait_for_task(rig.db, task_id, "done")
    shown = rig.slack.visible_thread(event["channel"], event["ts"])
    assert [m.replace("\u200d", "") for m in shown if m != event.get("text")] == [ANSWER]
    assert "<!here>" not in rig.slack.stream(live.channel, live.ts).text  # neutralized
    assert rig.slack.posts == []
    assert await streams_counted(rig, "reply", "completed") == 1


@dataclass(frozen=True)
class TwoPauses:
    """A streamed completion that stops twice: after its first `first` SSE events until
    `go_on`, and before its last `last` events until `finish`."""

    completion: Completion
    first: int
    last: int
    go_on: asyncio.Event
    finish: asyncio.Event

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.content_type = "text/event-stream"
        await response.prepare(request)
        chunks = self.completion.chunks()
        for n, chunk in enumerate(chunks):
            if n == self.first:
                await self.go_on.wait()
            if n == len(chunks) - self.last:
                await self.finish.wait()
            await response.write(chunk)
        await response.write_eof()
        return response


# A whole second between calls: what comes after the first words arrives inside it.
@pytest.mark.rig(overrides={**STREAMING, "THREADGATE_STREAM_INTERVAL_SECONDS": "1"})
async def test_text_that_arrives_between_appends_is_sent_before_the_reply_ends(
    rig: Rig,
) -> None:
    """Text that comes while the draft waits out its append interval is rendered and sent
    at the next append, not kept for the end: the whole answer shows, over a start and an
    append, while the model has yet to say it is finished."""
    go_on, finish = asyncio.Event(), asyncio.Event()
    answer = reply_with_tool("final_reply", {"text": ANSWER})
    rig.model.script(TwoPauses(answer, first=8, last=2, go_on=go_on, finish=finish))
    event = app_mention_event(text="<@UBOT> explain")
    await send(rig, event)
    [live] = await rig.slack.wait_for_streams(1)

    def shown() -> str:
        return rig.slack.stream(live.channel, live.ts).text.replace("\u200d", "")

    await rig.slack.wait_until(lambda: shown() != "", 10, what="the first words")
    assert shown() != ANSWER
    go_on.set()
    await rig.slack.wait_until(lambda: shown() == ANSWER, 10, what="the rest, appended")
    held = rig.slack.stream(live.channel, live.ts)
    assert held.state == "streaming"
    assert len([c for c in held.chunks if c.get("type") == "markdown_text"]) == 2
    finish.set()
    [done] = await rig.slack.wait_for_streams(1, stopped=True)
    assert done.ts == live.ts and rig.slack.posts == []
    await wait_for_task(rig.db, f"{DEFAULT_TEAM}:{event['channel']}:{event['ts']}", "done")
    assert await streams_counted(rig, "reply", "completed") == 1


async def test_a_dm_streams_without_a_recipient(rig: Rig) -> None:
    rig.model.script(reply_with_tool("final_reply", {"text": "hello there"}))
    event = dm_message_event(text="hi")
    await send(rig, event)
    [done] = await rig.slack.wait_for_streams(1, stopped=True)
    assert done.channel == DEFAULT_DM and done.recipient_user_id is None
    assert done.text == "hello there" and rig.slack.posts == []


async def test_where_slack_refuses_streams_the_reply_is_posted_whole(rig: Rig) -> None:
    rig.slack.refuse_streaming()
    rig.model.script(reply_with_tool("final_reply", {"text": ANSWER}))
    event = app_mention_event(text="<@UBOT> explain")
    await send(rig, event)
    [post] = await rig.slack.wait_for_posts(1)
    assert post.thread_ts == event["ts"] and "two paragraphs" in post.text
    assert [s for s in rig.slack.streams if not s.deleted] == []
    assert await streams_counted(rig, "reply", "refused") == 1


async def test_delegate_after_a_reply_began_leaves_only_the_acknowledgment(rig: Rig) -> None:
    """`delegate` outranks `final_reply` in the same answer: the half answer that was
    showing is taken back; the thread shows the acknowledgment, then the final reply."""
    subtasks = [{"type": "agent", "params": {"instructions": "look it up"}}]

    def model(seen: RecordedRequest) -> Reply:
        if str(seen.body["messages"][0]["content"]) == SUBAGENT_PROMPT:
            return reply_with_tool("final_reply", {"text": "found"})
        if seen.body["messages"][-1]["role"] == "tool":
            return reply_with_tool("final_reply", {"text": "All done."})
        return Completion(
            tool_calls=[
                FakeToolCall("final_reply", {"text": "A half answer I should not show"}, "c1"),
                FakeToolCall("delegate", {"acknowledgment": "On it.", "subtasks": subtasks}, "c2"),
            ]
        )

    rig.model.default = model
    event = app_mention_event(text="<@UBOT> research this")
    await send(rig, event)
    task_id = f"{DEFAULT_TEAM}:{event['channel']}:{event['ts']}"
    await wait_for_task(rig.db, task_id, "done")
    shown = [
        m for m in rig.slack.visible_thread(event["channel"], event["ts"]) if "<@UBOT>" not in m
    ]
    assert shown == ["On it.", "All done."]
    assert all("half answer" not in m for m in shown)
    assert await streams_counted(rig, "reply", "taken_back") == 1


async def test_an_acknowledgment_shows_its_subtasks_as_live_task_cards(rig: Rig) -> None:
    """The ack is a streamed message in plan mode: one card per subtask, pending, then in
    progress, then complete; it ends (with our metadata) before the reply streams beneath."""
    release = asyncio.Event()

    def model(seen: RecordedRequest) -> Reply:
        messages = seen.body["messages"]
        if str(messages[0]["content"]) == SUBAGENT_PROMPT:
            return Gated(reply_with_tool("final_reply", {"text": "a finding"}), release, before=1)
        if messages[-1]["role"] == "tool":
            return reply_with_tool("final_reply", {"text": "Summary of the finding."})
        subtasks = [{"type": "agent", "params": {"instructions": "find the thing"}}]
        return reply_with_tool("delegate", {"acknowledgment": "Looking…", "subtasks": subtasks})

    rig.model.default = model
    event = app_mention_event(text="<@UBOT> find it")
    await send(rig, event)
    [ack] = await rig.slack.wait_for_streams(1)
    assert ack.task_display_mode == "plan"
    await rig.slack.wait_until(
        lambda: _statuses(rig, ack.channel, ack.ts) == ("pending", "in_progress"),
        10,
        what=f"card ({rig.slack.stream(ack.channel, ack.ts).tasks})",
    )
    [card] = rig.slack.stream(ack.channel, ack.ts).tasks.values()
    assert card.title == "agent: find the thing"
    release.set()
    streams = await rig.slack.wait_for_streams(2, stopped=True)
    ack_done, reply = streams
    assert ack_done.ts == ack.ts and _statuses(rig, ack.channel, ack.ts)[-1:] == ("complete",)
    assert (
        ack_done.metadata is not None and "ack" in ack_done.metadata["event_payload"]["outbox_id"]
    )
    assert reply.text == "Summary of the finding." and float(reply.ts) > float(ack.ts)
    assert rig.slack.posts == []


async def test_a_reply_longer_than_one_message_continues_in_the_next(rig: Rig) -> None:
    paragraph = "word " * 399 + "end.\n\n"  # 2,000 characters
    text = paragraph * 8  # 16,000: one streamed message of at most 12,000, then a post
    rig.model.script(reply_with_tool("final_reply", {"text": text}))
    event = dm_message_event(text="long please")
    await send(rig, event)
    [first] = await rig.slack.wait_for_streams(1, stopped=True)
    [rest] = await rig.slack.wait_for_posts(1)
    assert len(first.text) <= 12_000 and len(rest.blocks[0]["text"]) <= 12_000  # type: ignore[index]
    assert rest.metadata is not None and rest.thread_ts == first.thread_ts
    parts = _markdown_of(rig, first.channel, first.thread_ts)
    assert len(parts) == 2 and all(len(part) <= 12_000 for part in parts)
    assert "\n\n".join(part.strip("\n") for part in parts) == text.strip("\n")


async def test_a_stream_whose_start_went_unanswered_is_found_and_completed(rig: Rig) -> None:
    """chat.startStream made the message but its answer was lost (a 5xx after the work):
    the ts was never recorded. The publish finds our unmarked message in the thread and
    completes it: one message, the whole answer."""
    rig.slack.fail_after_recording("chat.startStream")
    rig.model.script(reply_with_tool("final_reply", {"text": "the whole answer"}))
    event = dm_message_event(text="hi")
    await send(rig, event)
    task_id = f"{DEFAULT_TEAM}:{event['channel']}:{event['ts']}"
    await wait_for_task(rig.db, task_id, "done")
    [stream] = rig.slack.streams
    shown = [m for m in rig.slack.visible_thread(event["channel"], stream.thread_ts) if m != "hi"]
    assert shown == ["the whole answer"] and rig.slack.posts == []
    assert await streams_counted(rig, "reply", "replaced") == 1
    [message] = [m for m in rig.slack.messages[stream.channel] if m["ts"] == stream.ts]
    assert message["metadata"]["event_payload"]["outbox_id"] == f"task:{task_id}:reply"


async def streams_counted(rig: Rig, kind: str, outcome: str) -> float:
    """`threadgate_streamed_messages_total{kind, outcome}` as /metrics shows it."""
    async with rig.http.get(rig.metrics_url) as response:
        text = await response.text()
    line = f'threadgate_streamed_messages_total{{kind="{kind}",outcome="{outcome}"}} '
    found = [row for row in text.splitlines() if row.startswith(line)]
    return float(found[0].rsplit(" ", 1)[1]) if found else 0.0


def _markdown_of(rig: Rig, channel: str, thread_ts: str) -> list[str]:
    """The markdown each of the bot's messages in the thread shows now, oldest first."""
    mine = [
        m
        for m in rig.slack.messages[channel]
        if m.get("user") == rig.slack.bot_user_id and m.get("thread_ts") == thread_ts
    ]
    return [
        str(m["blocks"][0]["text"]) if m.get("blocks") else str(m.get("text"))
        for m in sorted(mine, key=lambda m: float(m["ts"]))
    ]


def _statuses(rig: Rig, channel: str, ts: str) -> Sequence[str]:
    cards = list(rig.slack.stream(channel, ts).tasks.values())
    return tuple(cards[0].history) if cards else ()


async def test_a_work_tool_shows_on_the_replys_timeline_while_it_runs(rig: Rig) -> None:
    """The model reads the clock, then answers: the reply's streamed message shows the
    tool's card (in progress, then complete) above the text."""

    def model(seen: RecordedRequest) -> Reply:
        if seen.body["messages"][-1]["role"] == "tool":
            return reply_with_tool("final_reply", {"text": "It is late."})
        return reply_with_tool("current_time", {}, call_id="clock")

    rig.model.default = model
    event = app_mention_event(text="<@UBOT> what time is it?")
    await send(rig, event)
    [done] = await rig.slack.wait_for_streams(1, stopped=True)
    assert done.task_display_mode == "timeline" and done.text == "It is late."
    [card] = done.tasks.values()
    assert card.title == "current_time" and card.status == "complete"
    assert done.metadata is not None and rig.slack.posts == []
