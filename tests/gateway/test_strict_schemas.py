"""Every schema a model is offered is closed (issue 47, item 7): in a request recorded at
the fake provider, every object of every tool's schema — control tools, built-in work
tools, the built-in subtask's params inside `delegate`, an MCP server's nested input —
says `additionalProperties: false`, unless it declares what its other keys are (a map);
and the round still reads a control call leniently."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from tests.agent.test_closed_schemas import objects, open_objects
from tests.fakes.mcp_server import stdio_entry
from tests.fakes.openai_api import OpenAIServer, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, SECRET, gateway_env
from tests.pg import create_database


async def test_every_tool_schema_in_a_recorded_request_is_closed(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The first request of a mention offers final_reply, delegate (with the agent
    subtask's params), the built-in tools and four MCP tools, one with nested models: no
    object in any of their schemas is open; the labels map keeps its declared values; a
    final_reply carrying a key its schema does not have is still the answer."""
    dsn = await create_database(postgres_dsn, "strict_schemas")
    allowed = ["echo", "file_ticket", "shaped", "spelled"]
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"fake": stdio_entry(tmp_path / "pid", allowedTools=allowed)}})
    )
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.script(reply_with_tool("final_reply", {"text": "closed", "mood": "cheerful"}))
        env = {**gateway_env(slack, model, dsn), "THREADGATE_MCP_CONFIG": str(config)}
        gateway = GatewayProcess(env, tmp_path)
        await gateway.start()
        try:
            envelope = event_callback(app_mention_event(text="<@UBOT> file it"))
            assert (await deliver(http, gateway.events_url, envelope, SECRET))[0] == 200
            [post] = await slack.wait_for_posts(1, timeout=60)
        finally:
            await gateway.stop()
    assert post.text == "closed"
    tools = {
        t["function"]["name"]: t["function"]["parameters"] for t in model.requests[0].body["tools"]
    }
    assert {"final_reply", "delegate", "current_time", "read_thread"} <= tools.keys()
    assert {f"fake__{name}" for name in allowed} <= tools.keys()
    open_anywhere = {
        name: where for name, schema in tools.items() if (where := open_objects(schema))
    }
    assert open_anywhere == {}
    [(_, params)] = [
        (w, n) for w, n in objects(tools["delegate"]) if w.endswith(".properties.params")
    ]
    assert "instructions" in params["properties"]
    ticket = tools["fake__file_ticket"]
    assert ticket["$defs"]["Reporter"]["additionalProperties"] is False
    labels = ticket["properties"]["labels"]["anyOf"][0]
    assert labels["additionalProperties"] == {"type": "string"}
