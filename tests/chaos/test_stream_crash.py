"""Crash mid-stream: SIGKILL the gateway while a reply is streaming into its thread.

A streamed reply shows before it is complete, so a crash leaves a half-written message in
the thread. After a new process takes the task over, the thread must show exactly one
message for the reply — the half-written one, completed with the whole answer and our
metadata — never the partial one plus a new one (gateway/delivery/streams.py, storage/outbox.py).

Two moments, each cycle in a thread of its own:
- `streaming`   the stream started and its ts is recorded; the model is held half way;
- `unrecorded`  chat.startStream reached Slack, which made the message, but its answer is
                held until after the kill: the ts was never recorded, and the new process
                must find the message in the thread (our bot, no metadata, no row knows it).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from tests.chaos.harness import (
    Processes,
    conversations,
    deliver_until_acked,
    marker_of,
    scaled,
)
from tests.fakes.openai_api import (
    Gated,
    OpenAIServer,
    RecordedRequest,
    Reply,
    reply_with_tool,
)
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN, STREAMING, gateway_env
from tests.pg import create_database

# Each cycle costs a gateway's start-up; the normal run kills one stream of each kind.
CYCLES = scaled(6, 1)
FAST = {
    **STREAMING,
    # Slack shows a stored post at once here; the margins only pace the test.
    "THREADGATE_SLACK_SETTLE_SECONDS": "0.5",
    "THREADGATE_SLACK_TIMEOUT_SECONDS": "3",
    "THREADGATE_WORKERS": "2",
}


def answer_for(seen: RecordedRequest) -> str:
    marker = marker_of(seen)
    paragraph = f"The answer to {marker} begins here and goes on for a while. "
    return paragraph * 20 + f"\n\nThat was all about {marker}."


@pytest.mark.parametrize("moment", ["streaming", "unrecorded"])
async def test_a_reply_killed_mid_stream_ends_as_one_whole_message(
    postgres_dsn: str, tmp_path: Path, moment: str
) -> None:
    dsn = await create_database(postgres_dsn, f"chaos_stream_{moment}")
    processes = Processes(tmp_path)
    threads = conversations(CYCLES, prefix="C0STREAMKILL")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        held = asyncio.Event()

        def answering(seen: RecordedRequest) -> Reply:
            completion = reply_with_tool("final_reply", {"text": answer_for(seen)})
            return Gated(completion, held, before=40) if not held.is_set() else completion

        model.default = answering
        env = gateway_env(slack, model, dsn) | FAST
        try:
            web = await processes.start(env)
            for thread in threads:
                held.clear()
                release = slack.hold("chat.startStream") if moment == "unrecorded" else None
                sent = thread.next_message("stream ")
                await deliver_until_acked(http, lambda web=web: web.events_url, sent)
                if release is None:
                    await slack.wait_until(
                        lambda sent=sent: any(
                            s.thread_ts == sent.thread_ts and s.text for s in slack.streams
                        ),
                        30,
                        what="a half-written reply",
                    )
                else:
                    await slack.wait_until(
                        lambda: bool(slack.calls_to("chat.startStream")), 30, what="a start"
                    )
                await web.kill()
                if release is not None:
                    release.set()  # Slack makes the message; nobody hears its ts
                held.set()
                slack.clear_faults("chat.startStream")
                # The process that takes the task over is the one the next cycle kills.
                web = await processes.start(env)
                await slack.wait_until(
                    lambda sent=sent: _complete(slack, sent.channel, sent.thread_ts),
                    60,
                    what=f"the reply to {sent.marker} completed",
                )
        finally:
            await processes.stop_all()
    for thread in threads:
        [sent] = thread.sent
        mine = _messages(slack, sent.channel, sent.thread_ts)
        assert len(mine) == 1, f"{sent.marker}: {len(mine)} messages\n{slack.describe()}"
        [message] = mine
        assert message["metadata"]["event_payload"]["outbox_id"] == f"task:{sent.task_id}:reply"
        shown = _shown(message)
        assert f"That was all about {sent.marker}." in shown
        assert shown.count(f"The answer to {sent.marker} begins") == 20
    assert slack.posts == [], "a second message was posted beside the streamed one"


def _messages(slack: FakeSlack, channel: str, thread_ts: str) -> list[dict]:  # type: ignore[type-arg]
    return [
        m
        for m in slack.messages.get(channel, [])
        if m.get("user") == slack.bot_user_id and m.get("thread_ts") == thread_ts
    ]


def _shown(message: dict) -> str:  # type: ignore[type-arg]
    """The text a person reads: a markdown block that replaced the stream's text, else the
    streamed text (blocks below it, such as a reply's feedback buttons, carry none)."""
    texts = [b["text"] for b in message.get("blocks") or () if b.get("type") == "markdown"]
    return texts[0] if texts else str(message["text"])


def _complete(slack: FakeSlack, channel: str, thread_ts: str) -> bool:
    return any(
        (m.get("metadata") or {}).get("event_type") == "threadgate_post"
        for m in _messages(slack, channel, thread_ts)
    )
