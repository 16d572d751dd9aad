"""One delegated task end to end, as a person in Slack sees it with streaming on: the
acknowledgment's plan card follows its subtask (whose sub-agent calls a real MCP tool), and
the answer streams beneath. The Slack calls, in order, are the record this test checks:

    chat.startStream   (plan)     the acknowledgment, one card "pending"
    chat.appendStream             the card "in_progress" (the sub-agent runs)
    chat.appendStream             the card "complete"
    chat.stopStream    (plan)     the acknowledgment complete (final card states), our metadata
    chat.startStream   (timeline) the answer, as it is written …
    chat.stopStream               … complete, with our metadata

and the sub-agent's MCP call is stored in `tool_calls`.
"""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path

import aiohttp

from agent.rounds.subagent import SUBAGENT_PROMPT
from storage import Database, tool_calls_of
from tests.fakes.mcp_server import stdio_entry
from tests.fakes.openai_api import Held, OpenAIServer, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, SECRET, STREAMING, gateway_env
from tests.pg import create_database, wait_for_task

STREAM_CALLS = ("chat.startStream", "chat.appendStream", "chat.stopStream", "chat.postMessage")


def model(seen: RecordedRequest, shown: asyncio.Event) -> Reply:
    """The delegating agent, and its sub-agent, whose first answer waits until the plan
    shows its card in progress: a fast subtask could otherwise finish before the card's
    update is sent, and the stream would rightly skip to "complete"."""
    messages = seen.body["messages"]
    last = messages[-1]
    if str(messages[0]["content"]) == SUBAGENT_PROMPT:
        if last["role"] == "tool":
            return reply_with_tool("final_reply", {"text": f"found: {last['content'][-60:]}"})
        call = reply_with_tool("fake__echo", {"text": "the subagent's query"}, call_id="sub_1")
        return Held(shown, call)
    if last["role"] == "tool":
        return reply_with_tool("final_reply", {"text": "Here is what the research found."})
    subtasks = [{"type": "agent", "params": {"instructions": "look it up with echo"}}]
    return reply_with_tool("delegate", {"acknowledgment": "Researching…", "subtasks": subtasks})


async def test_a_delegated_task_streams_its_plan_then_its_answer(
    postgres_dsn: str, tmp_path: Path
) -> None:
    dsn = await create_database(postgres_dsn, "delegated_stream")
    config = tmp_path / "mcp.json"
    servers = {"fake": stdio_entry(tmp_path / "pid", allowedTools=["echo"])}
    config.write_text(
        json.dumps({"mcpServers": servers, "subtasks": {"agent": {"servers": ["fake"]}}})
    )
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as fake_model,
        aiohttp.ClientSession() as http,
    ):
        card_shown = asyncio.Event()
        fake_model.default = functools.partial(model, shown=card_shown)
        env = {
            **gateway_env(slack, fake_model, dsn),
            **STREAMING,
            "THREADGATE_MCP_CONFIG": str(config),
        }
        gateway = GatewayProcess(env, tmp_path)
        await gateway.start()
        try:
            event = app_mention_event(text="<@UBOT> research this")
            assert (await deliver(http, gateway.events_url, event_callback(event), SECRET))[
                0
            ] == 200
            await slack.wait_until(
                lambda: any(
                    "in_progress" in card.history
                    for s in slack.streams
                    for card in s.tasks.values()
                ),
                what="the card in progress",
            )
            card_shown.set()
            task_id = f"T1:{event['channel']}:{event['ts']}"
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_for_task(db, task_id, "done", deadline=60)
                calls = await tool_calls_of(db, task_id)
        finally:
            await gateway.stop()
    sequence = [c for c in slack.calls if c.method in STREAM_CALLS]
    ack, reply = (s for s in slack.streams)
    shown = []
    for call in sequence:
        chunks = call.params.get("chunks") or []
        cards = [(c["title"], c["status"]) for c in chunks if c.get("type") == "task_update"]
        mode = call.params.get("task_display_mode")
        which = "ack" if mode == "plan" or call.params.get("ts") == ack.ts else "reply"
        shown.append((call.method, which, cards))
    print("\n".join(f"{m:18} {w:5} {c}" for m, w, c in shown))  # the record, for people
    assert ack.task_display_mode == "plan" and reply.task_display_mode == "timeline"
    [card] = ack.tasks.values()
    assert card.title == "agent: look it up with echo"
    # Each state once, in order (the stop restates the final one).
    assert list(dict.fromkeys(card.history)) == ["pending", "in_progress", "complete"]
    assert ack.metadata is not None and ack.metadata["event_payload"]["outbox_id"].endswith(
        ":ack:0"
    )
    assert reply.text == "Here is what the research found." and reply.metadata is not None
    assert float(reply.ts) > float(ack.ts) and slack.posts == []
    [call] = calls
    assert (call.name, call.state) == ("fake__echo", "ok") and "the subagent's query" in call.output
