"""MCP tools in a real `threadgate serve`: a mention answered after the model called a tool
of a real MCP server (stdio), the call stored in `tool_calls`, counted in
`threadgate_tool_calls_total`, the server up in `threadgate_mcp_server_up`, and the
server's secret nowhere in the gateway's log; a long tool's progress on its card while it
runs, the server told who called, a task-only tool not offered and a tool's error logged as
one line; and a server that cannot connect does not stop the gateway from serving (its
gauge says 0)."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.config.settings import load_settings
from gateway.operator.doctor import check_mcp
from storage import Database, tool_calls_of
from tests.fakes.mcp_server import stdio_entry
from tests.fakes.openai_api import (
    Completion,
    FakeToolCall,
    OpenAIServer,
    RecordedRequest,
    Reply,
    reply_with_tool,
)
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.fakes.slack_streams import StreamedMessage
from tests.gateway.process import GatewayProcess, run_cli
from tests.gateway.rig import BOT_TOKEN, SECRET, STREAMING, gateway_env
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


def tool_results(seen: RecordedRequest) -> dict[str, str]:
    """The tool results a model request carries, by call id."""
    return {
        m["tool_call_id"]: m["content"] for m in seen.body["messages"] if m.get("role") == "tool"
    }


async def test_a_long_tools_progress_shows_on_its_card_while_it_runs(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The model asks who the server thinks called and calls a failing tool, then a tool
    that reports progress and waits: its card on the reply's timeline shows `3/3 (100%) ·
    step 3 of 3` while it is still in progress, then the tool's name and complete. The
    server saw threadgate and our version; `needs_task` was never offered; the failure is
    one log line without a traceback."""
    dsn = await create_database(postgres_dsn, "mcp_gateway_progress")
    config = write_config(tmp_path, {"fake": stdio_entry(tmp_path / "pid")})
    gate = tmp_path / "gate"

    def model(seen: RecordedRequest) -> Reply:
        done = tool_results(seen)
        if "long" in done:
            return reply_with_tool("final_reply", {"text": f"the server saw {done['who']}"})
        if "who" in done:
            return reply_with_tool(
                "fake__progress", {"steps": 3, "gate": str(gate)}, call_id="long"
            )
        return Completion(
            tool_calls=[
                FakeToolCall("fake__client_info", {}, "who"),
                FakeToolCall("fake__fails", {}, "bad"),
            ]
        )

    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as openai,
        aiohttp.ClientSession() as http,
    ):
        openai.default = model
        env = {**gateway_env(slack, openai, dsn), **STREAMING, "THREADGATE_MCP_CONFIG": str(config)}
        gateway = GatewayProcess(env, tmp_path)
        await gateway.start()
        try:
            envelope = event_callback(app_mention_event(text="<@UBOT> run the long job"))
            assert (await deliver(http, gateway.events_url, envelope, SECRET))[0] == 200
            shows = "fake__progress · 3/3 (100%) · step 3 of 3"
            await slack.wait_until(
                lambda: any(_card(s, "long") == (shows, "in_progress") for s in slack.streams),
                timeout=60,
                what=f"the card {shows!r} in progress",
            )
            gate.touch()  # the tool may end now
            [done] = await slack.wait_for_streams(1, stopped=True, timeout=60)
            metrics = await _metrics(http, gateway)
        finally:
            await gateway.stop()
    card = done.tasks["long"]
    assert (card.title, card.status) == ("fake__progress", "complete")
    assert card.history[0] == "in_progress" and card.history[-1] == "complete"
    assert done.tasks["bad"].status == "error"
    version = json.dumps(metadata.version("threadgate"))
    assert f'{{"name": "threadgate", "version": {version}}}' in done.text
    offered = {t["function"]["name"] for t in openai.requests[0].body["tools"]}
    assert "fake__echo" in offered and "fake__needs_task" not in offered
    assert 'threadgate_tool_progress_total{server="fake",tool="progress"}' in metrics
    log = gateway.log.decode(errors="replace")
    assert "MCP server fake: not offering needs_task (it runs only as an MCP task" in log
    [failure] = [line for line in log.splitlines() if "fake__fails" in line and "failed" in line]
    assert "(MCP server fake, tool fails) failed: Error executing tool fails" in failure
    # The fake server prints its own traceback on its stderr (relayed, each line under
    # "MCP server fake:"); none of the gateway's own records carries one.
    assert not [line for line in log.splitlines() if line.startswith("Traceback")]


def _card(stream: StreamedMessage, call_id: str) -> tuple[str, str] | None:
    card = stream.tasks.get(call_id)
    return None if card is None else (card.title, card.status)


async def _metrics(http: aiohttp.ClientSession, gateway: GatewayProcess) -> str:
    assert gateway.metrics_url is not None
    async with http.get(gateway.metrics_url) as response:
        return await response.text()


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


async def test_doctor_warns_about_a_tool_it_will_not_offer(tmp_path: Path) -> None:
    """A server whose allowed tools include one that runs only as an MCP task: connected,
    a warning naming that tool and why."""
    entry = stdio_entry(tmp_path / "pid", allowedTools=["echo", "needs_task"])
    settings = load_settings(threadgate_mcp_config=write_config(tmp_path, {"fake": entry}))
    [finding] = await check_mcp(settings, limit=60)
    assert (finding.check, finding.status) == ("mcp fake", "warn")
    assert finding.detail.startswith("connected over stdio; tools: fake__echo; not offered: ")
    assert "needs_task: it runs only as an MCP task (execution.taskSupport: required)" in (
        finding.detail
    )
