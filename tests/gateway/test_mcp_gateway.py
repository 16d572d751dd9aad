"""MCP tools in a real `threadgate serve`: a mention answered after the model called a tool
of a real MCP server (stdio), the call stored in `tool_calls`, counted in
`threadgate_tool_calls_total`, the server up in `threadgate_mcp_server_up`, and the
server's secret nowhere in the gateway's log; and a server that cannot connect does not
stop the gateway from serving (its gauge says 0)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.config.settings import load_settings
from gateway.operator.doctor import check_mcp
from storage import Database, tool_calls_of
from tests.fakes.mcp_server import stdio_entry
from tests.fakes.openai_api import OpenAIServer, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess, run_cli
from tests.gateway.rig import BOT_TOKEN, SECRET, gateway_env
from tests.pg import create_database

TOKEN = "mcp-live-token-0123456789"


def write_config(tmp_path: Path, servers: dict[str, Any]) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def answer_with_tool_output(seen: RecordedRequest) -> Reply:
    """The second model request: quote what the tool returned (framed as data)."""
    tool_results = [m["content"] for m in seen.body["messages"] if m.get("role") == "tool"]
    return reply_with_tool("final_reply", {"text": f"the tool said: {tool_results[-1]}"})


async def test_a_mention_is_answered_after_an_mcp_tool_call(
    postgres_dsn: str, tmp_path: Path
) -> None:
    dsn = await create_database(postgres_dsn, "mcp_gateway")
    env_entry = {"FAKE_MCP_TOKEN": "${MCP_TOKEN}", "FAKE_MCP_GOT_TOKEN": "${MCP_TOKEN}"}
    entry = stdio_entry(tmp_path / "pid", env=env_entry, allowedTools=["echo", "token_is_set"])
    config = write_config(tmp_path, {"fake": entry})
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.script(
            reply_with_tool("fake__token_is_set", {}, call_id="call_a"),
            reply_with_tool("fake__echo", {"text": "from slack"}, call_id="call_b"),
            answer_with_tool_output,
        )
        env = {
            **gateway_env(slack, model, dsn),
            "THREADGATE_MCP_CONFIG": str(config),
            "MCP_TOKEN": TOKEN,
            "THREADGATE_LOG_LEVEL": "DEBUG",
        }
        gateway = GatewayProcess(env, tmp_path)
        await gateway.start()
        try:
            envelope = event_callback(app_mention_event(text="<@UBOT> use the tool"))
            assert (await deliver(http, gateway.events_url, envelope, SECRET))[0] == 200
            [post] = await slack.wait_for_posts(1, timeout=60)
            assert "echo: from slack" in post.text
            offered = {t["function"]["name"] for t in model.requests[0].body["tools"]}
            assert {"fake__echo", "fake__token_is_set"} <= offered
            assert "fake__hidden" not in offered
            first_result = [m for m in model.requests[1].body["messages"] if m["role"] == "tool"]
            assert "yes" in first_result[-1]["content"]  # the secret reached the server
            metrics_url = gateway.metrics_url
            assert metrics_url is not None
            async with http.get(metrics_url) as response:
                metrics = await response.text()
            assert (
                'threadgate_tool_calls_total{outcome="ok",server="fake",tool="echo"} 1.0' in metrics
            )
            assert 'threadgate_mcp_server_up{server="fake"} 1.0' in metrics
        finally:
            await gateway.stop()
    async with Database(dsn) as db:
        task_id = await db.pool.fetchval("SELECT id FROM tasks")
        calls = await tool_calls_of(db, task_id)
        stored = await db.pool.fetchval(
            "SELECT string_agg(arguments || output, '') FROM tool_calls"
        )
    assert [(c.call_id, c.name, c.state) for c in calls] == [
        ("call_a", "fake__token_is_set", "ok"),
        ("call_b", "fake__echo", "ok"),
    ]
    assert calls[1].output == "echo: from slack"
    log = gateway.log.decode(errors="replace")
    assert "MCP server fake connected" in log
    assert TOKEN not in log and TOKEN not in stored
    assert all(TOKEN not in json.dumps(r.body) for r in model.requests)


async def test_a_server_that_cannot_connect_does_not_stop_serving(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Its failure is logged and its gauge is 0; the gateway listens and answers without
    its tools."""
    dsn = await create_database(postgres_dsn, "mcp_gateway_down")
    config = write_config(tmp_path, {"down": {"url": "http://127.0.0.1:1/mcp"}})
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.script(reply_with_tool("final_reply", {"text": "fine without it"}))
        env = {**gateway_env(slack, model, dsn), "THREADGATE_MCP_CONFIG": str(config)}
        gateway = GatewayProcess(env, tmp_path)
        await gateway.start()
        try:
            await gateway.wait_for_log(rb"MCP server down is not connected yet")
            envelope = event_callback(app_mention_event(text="<@UBOT> hi"))
            assert (await deliver(http, gateway.events_url, envelope, SECRET))[0] == 200
            [post] = await slack.wait_for_posts(1, timeout=60)
            assert "fine without it" in post.text
            assert all(
                not t["function"]["name"].startswith("down__")
                for t in model.requests[0].body["tools"]
            )
            assert gateway.metrics_url is not None
            async with http.get(gateway.metrics_url) as response:
                assert 'threadgate_mcp_server_up{server="down"} 0.0' in await response.text()
        finally:
            await gateway.stop()


async def test_serve_with_a_bad_mcp_config_is_one_sentence(tmp_path: Path) -> None:
    """A reference to an unset variable stops `serve` with one line naming the variable,
    the server and the field."""
    config = write_config(
        tmp_path, {"gh": {"url": "http://127.0.0.1:1/", "headers": {"A": "${NOPE}"}}}
    )
    env = {
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_SIGNING_SECRET": "s3cr3t-value",
        "THREADGATE_MODEL": "openai:gpt-test",
        "OPENAI_API_KEY": "sk-test",
        "DATABASE_URL": "postgresql://127.0.0.1:1/none",
        "THREADGATE_METRICS_ADDRESS": "off",
        "THREADGATE_MCP_CONFIG": str(config),
    }
    status, stderr = await run_cli(["serve"], env, tmp_path)
    assert status == 2 and stderr.count("\n") == 1, stderr
    assert "THREADGATE_MCP_CONFIG" in stderr and 'server "gh" headers.A uses ${NOPE}' in stderr


@pytest.mark.parametrize("connects", [True, False])
async def test_doctor_lists_every_server(tmp_path: Path, connects: bool) -> None:
    """Each server: connected with its tools, or not connected and why."""
    entry = stdio_entry(tmp_path / "pid", allowedTools=["echo"])
    servers = {"fake": entry} if connects else {"down": {"url": "http://127.0.0.1:1/mcp"}}
    settings = load_settings(threadgate_mcp_config=write_config(tmp_path, servers))
    [finding] = await check_mcp(settings, limit=60)
    if connects:
        assert (finding.check, finding.status) == ("mcp fake", "ok")
        assert finding.detail == "connected over stdio; tools: fake__echo"
    else:
        assert (finding.check, finding.status) == ("mcp down", "FAIL")
        assert finding.detail.startswith("not connected over http (")
