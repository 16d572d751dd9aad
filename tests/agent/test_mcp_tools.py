"""MCP servers as work tools, against a real MCP server (`tests/fakes/mcp_server.py`) over
stdio and over Streamable HTTP: calls, limits, a disallowed tool, a server that dies and
comes back, and a secret that is used but never shown."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent import (
    Backoff,
    Connecting,
    McpClients,
    ProviderSettings,
    ReferenceCatalog,
    Reply,
    RouteConfig,
    SubtaskRegistry,
    Task,
    Toolbox,
    ToolCall,
    ToolCallRecord,
    ToolContext,
    ToolRegistry,
    UserMessage,
    open_route,
    parse_mcp_config,
    round_controls,
    run_round,
)
from agent.rounds.mcp_tools import offered_name
from agent.rounds.tools import builtin_tools
from tests.fakes.anthropic_api import AnthropicServer
from tests.fakes.anthropic_api import reply_with_tool as anthropic_tool_reply
from tests.fakes.mcp_server import REPORT_PDF, SCREENSHOT_PNG, HttpServerProcess, stdio_entry
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.openai_api import reply_with_tool as openai_tool_reply

TASK = Task("T1", "S1", {})
TOKEN = "mcp-token-0123456789-secret"
ALLOWED = ["echo", "slow", "huge", "fails", "token_is_set"]


async def eventually(condition: Callable[[], bool], timeout: float = 30) -> None:  # noqa: ASYNC109
    """Wait until `condition()` holds, checking every 50 ms, failing at the deadline."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - the state of a child process, polled
            await asyncio.sleep(0.05)


class Server:
    """A fake MCP server reachable one way, with the config entry that reaches it."""

    def __init__(self, transport: str, pidfile: Path, http: HttpServerProcess | None) -> None:
        self.transport = transport
        self.pidfile = pidfile
        self.http = http

    def entry(self, **options: Any) -> dict[str, Any]:
        if self.http is not None:
            headers = {"Authorization": "Bearer ${FAKE_TOKEN}"}
            return {"url": self.http.url, "headers": headers, **options}
        env = {"FAKE_MCP_TOKEN": "${FAKE_TOKEN}", "FAKE_MCP_GOT_TOKEN": "${FAKE_TOKEN}"}
        return stdio_entry(self.pidfile, env=env, **options)

    @property
    def pid(self) -> int:
        return int(self.pidfile.read_text())


@pytest.fixture(scope="module")
async def http_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Server]:
    """One server over HTTP for the module's tests that leave it running: each start is an
    interpreter loading the MCP SDK's server. (Every test connects a client of its own.)"""
    pidfile = tmp_path_factory.mktemp("mcp") / "http.pid"
    served = Server("http", pidfile, HttpServerProcess(pidfile, token=TOKEN))
    async with started(served):
        yield served


@pytest.fixture(params=["stdio", "http"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Server:
    """A server one way; over HTTP the module's."""
    if request.param == "http":
        return request.getfixturevalue("http_server")
    return Server("stdio", tmp_path / "stdio.pid", None)


@pytest.fixture(params=["stdio", "http"])
async def own_server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Server]:
    """A server one way, of this test's own: it may kill it."""
    pidfile = tmp_path / f"{request.param}.pid"
    http = HttpServerProcess(pidfile, token=TOKEN) if request.param == "http" else None
    async with started(Server(request.param, pidfile, http)) as served:
        yield served


@contextlib.asynccontextmanager
async def started(served: Server) -> AsyncIterator[Server]:
    """`served`, its HTTP server (if it has one) running until the block ends."""
    if served.http is not None:
        await served.http.start()
    try:
        yield served
    finally:
        if served.http is not None:
            await served.http.kill()


class Recorder:
    def __init__(self) -> None:
        self.records: list[ToolCallRecord] = []

    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        self.records.append(record)


async def connect(
    server: Server, allowed: list[str] = ALLOWED, **options: Any
) -> tuple[McpClients, ToolRegistry]:
    raw = {"mcpServers": {"fake": server.entry(allowedTools=allowed, **options)}}
    config = parse_mcp_config(raw, {"FAKE_TOKEN": TOKEN})
    registry = builtin_tools()
    clients = McpClients(config, registry, Connecting(Backoff(0.05, 0.5), ping_seconds=0.5))
    clients.start()
    await clients.wait_settled(60)
    assert clients.connections[0].connected, clients.states()
    return clients, registry


def call(name: str, arguments: str) -> ToolCall:
    return ToolCall.from_raw(f"call-{name}", name, arguments)


async def test_a_tool_call_round_trips(server: Server) -> None:
    """`fake__echo` is offered with the server's schema, runs on the server, and the
    observer sees it start and end."""
    clients, registry = await connect(server)
    try:
        recorder = Recorder()
        box = Toolbox(registry, ToolContext(TASK, observer=recorder))
        spec = next(s for s in box.specs if s.name == "fake__echo")
        assert spec.parameters["properties"]["text"]["type"] == "string"
        [result] = await box.run([call("fake__echo", '{"text": "hello"}')])
        assert (result.is_error, result.content) == (False, "echo: hello")
        assert [r.state for r in recorder.records] == ["running", "ok"]
        assert recorder.records[1].output == "echo: hello"
        assert recorder.records[0].arguments == '{"text": "hello"}'
        assert clients.origin("fake__echo") == ("fake", "echo")
        assert clients.origin("current_time") is None
    finally:
        await clients.aclose()


async def test_bad_arguments_and_tool_errors_are_failed_results(server: Server) -> None:
    """Arguments against the server's schema are refused before the call; a tool that
    raises is an error result; the connection is fine after both."""
    clients, registry = await connect(server)
    try:
        box = Toolbox(registry, ToolContext(TASK))
        wrong, failing, fine = await box.run(
            [
                call("fake__echo", '{"text": 5}'),
                call("fake__fails", "{}"),
                call("fake__echo", '{"text": "ok"}'),
            ]
        )
        assert wrong.is_error and 'text: 5 is not of type "string"' in wrong.content
        assert failing.is_error and "fake__fails failed" in failing.content
        assert (fine.is_error, fine.content) == (False, "echo: ok")
    finally:
        await clients.aclose()


async def test_backtracking_patterns_in_a_servers_schemas_are_answered_at_once(
    server: Server,
) -> None:
    """`^(a+)+$` in `spelled`'s input schema and in `shaped`'s output schema, against
    forty a's and a `!`: both calls are failed results saying the value does not match, and
    the same tools answer a value that does."""
    clients, registry = await connect(server, allowed=["spelled", "shaped"])
    try:
        box = Toolbox(registry, ToolContext(TASK))
        bad = json.dumps({"word": "a" * 40 + "!"})
        refused, unshaped = await box.run([call("fake__spelled", bad), call("fake__shaped", bad)])
        assert refused.is_error and "word: " in refused.content
        assert "does not match" in refused.content
        assert unshaped.is_error and "output schema refuses" in unshaped.content
        good = '{"word": "aaaa"}'
        spelled, shaped = await box.run([call("fake__spelled", good), call("fake__shaped", good)])
        assert (spelled.content, shaped.content) == ("spelled: aaaa", "shaped: aaaa")
    finally:
        await clients.aclose()


async def test_a_slow_tool_is_cut_by_its_servers_timeout(server: Server) -> None:
    """`timeoutSeconds` overrides the round's limit: a 60 s call ends as a failed result
    at 1 s, and the server answers the next call."""
    clients, registry = await connect(server, timeoutSeconds=1)
    try:
        box = Toolbox(registry, ToolContext(TASK))
        [slow] = await box.run([call("fake__slow", '{"seconds": 60}')])
        assert slow.is_error and "time limit (1 s)" in slow.content
        [after] = await box.run([call("fake__echo", '{"text": "still here"}')])
        assert after.content == "echo: still here"
    finally:
        await clients.aclose()


async def test_a_huge_output_is_capped(server: Server) -> None:
    """3 MB from the server reach the model as `maxOutputChars` characters and a note."""
    clients, registry = await connect(server, maxOutputChars=1000)
    try:
        box = Toolbox(registry, ToolContext(TASK))
        [huge] = await box.run([call("fake__huge", '{"megabytes": 3}')])
        assert not huge.is_error
        assert huge.content.startswith("x" * 1000 + "\n[output cut: 3,145,728 characters")
        assert len(huge.content) < 1100
    finally:
        await clients.aclose()


async def test_a_disallowed_tool_is_never_offered(server: Server) -> None:
    """`hidden` is on the server but not in allowedTools: not offered, not runnable."""
    clients, registry = await connect(server)
    try:
        box = Toolbox(registry, ToolContext(TASK))
        assert "fake__hidden" not in box and "fake__echo" in box
        assert all("hidden" not in spec.name for spec in box.specs)
        assert clients.states()[0].tools == tuple(f"fake__{name}" for name in ALLOWED)
    finally:
        await clients.aclose()


async def test_a_server_that_dies_comes_back(own_server: Server) -> None:
    """Killed, the server's tools are no longer offered and a call in flight or made
    meanwhile is a failed result; once it is back (stdio: respawned by the client; HTTP:
    restarted), it is reconnected and answers."""
    server = own_server
    clients, registry = await connect(server)
    try:
        box = Toolbox(registry, ToolContext(TASK))
        first_pid = server.pid
        os.kill(first_pid, signal.SIGKILL)
        [lost] = await box.run([call("fake__echo", '{"text": "anyone?"}')])
        assert lost.is_error
        connection = clients.connections[0]
        if server.http is not None:
            await eventually(lambda: not connection.connected)
            assert "fake__echo" not in Toolbox(registry, ToolContext(TASK))
            await server.http.start()
        await eventually(lambda: connection.connected and server.pid != first_pid)
        again = Toolbox(registry, ToolContext(TASK))
        [back] = await again.run([call("fake__echo", '{"text": "back"}')])
        assert (back.is_error, back.content) == (False, "echo: back")
    finally:
        await clients.aclose()


async def test_a_secret_from_the_environment_is_used_but_never_shown(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """`${FAKE_TOKEN}` reaches the server (stdio: its env; HTTP: the Authorization header
    the server requires), yet no log line at DEBUG, tool spec or result carries it."""
    caplog.set_level(logging.DEBUG)
    clients, registry = await connect(server)
    try:
        box = Toolbox(registry, ToolContext(TASK))
        results = await box.run(
            [call("fake__token_is_set", "{}"), call("fake__fails", "{}"), call("fake__echo", "{}")]
        )
        if server.http is None:
            assert results[0].content == "yes"
        shown = [r.content for r in results] + [str(box.specs), str(clients.states())]
        assert [text for text in shown if TOKEN in text] == []
        assert TOKEN in clients.secrets()
    finally:
        await clients.aclose()
    assert TOKEN not in caplog.text


async def test_a_stdio_servers_stderr_is_logged_with_its_secrets_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """What a stdio server writes on stderr reaches our log, named after the server and
    with the config's secrets replaced, and never the process's own stderr."""
    caplog.set_level(logging.INFO)
    env = {"FAKE_MCP_GOT_TOKEN": "${FAKE_TOKEN}", "FAKE_MCP_SAY": "up; my token: {token}"}
    entry = stdio_entry(tmp_path / "pid", env=env, allowedTools=ALLOWED)
    config = parse_mcp_config({"mcpServers": {"fake": entry}}, {"FAKE_TOKEN": TOKEN})
    clients = McpClients(config, builtin_tools(), Connecting(Backoff(0.05, 0.5)))
    clients.start()
    try:
        await clients.wait_settled(60)
        await eventually(lambda: "up; my token" in caplog.text)
    finally:
        await clients.aclose()
    assert "MCP server fake: up; my token: [redacted]" in caplog.text
    assert TOKEN not in caplog.text
    assert TOKEN not in capfd.readouterr().err


async def test_sub_agents_get_the_servers_their_type_is_given(tmp_path: Path) -> None:
    """With `"subtasks": {"research": {"servers": ["fake"]}}` a research sub-agent is
    offered the server's tools; another subtask type and the task's rounds differ."""
    entry = stdio_entry(tmp_path / "pid", allowedTools=["echo"])
    raw = {"mcpServers": {"fake": entry}, "subtasks": {"research": {"servers": ["fake"]}}}
    registry = ToolRegistry()
    clients = McpClients(parse_mcp_config(raw, {}), registry)
    clients.start()
    try:
        await clients.wait_settled(60)

        def names(subtask_type: str | None) -> frozenset[str]:
            return Toolbox(registry, ToolContext(TASK, subtask_type=subtask_type)).names

        assert names(None) == {"fake__echo"}
        assert names("research") == {"fake__echo"}
        assert names("agent") == frozenset()
    finally:
        await clients.aclose()


async def test_a_server_that_cannot_start_is_reported_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A command that does not exist: not connected, the reason kept (with the secret in
    its path redacted, in the state and in the log), nothing offered."""
    raw = {"mcpServers": {"gone": {"command": str(tmp_path / "no-such-server-${FAKE_TOKEN}")}}}
    registry = ToolRegistry()
    config = parse_mcp_config(raw, {"FAKE_TOKEN": TOKEN})
    clients = McpClients(config, registry, Connecting(Backoff(0.05, 0.1)))
    clients.start()
    try:
        await clients.wait_settled(30)
        [state] = clients.states()
        assert not state.connected and state.error and "no-such-server-[redacted]" in state.error
        assert len(Toolbox(registry, ToolContext(TASK)).specs) == 0
    finally:
        await clients.aclose()
    assert "no-such-server-[redacted]" in caplog.text and TOKEN not in caplog.text


@pytest.mark.parametrize(
    ("server", "tool", "expected"),
    [
        ("github", "search_issues", "github__search_issues"),
        ("fs", "read.file", None),
        ("s", "x" * 80, None),
    ],
)
def test_offered_names_follow_the_providers_rule(
    server: str, tool: str, expected: str | None
) -> None:
    """Names are `server__tool`; names providers would refuse are cleaned and hashed."""
    name = offered_name(server, tool)
    if expected is not None:
        assert name == expected
    import re

    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name)
    assert name.startswith(f"{server}__")
    assert offered_name(server, tool + "y") != name


async def test_a_tools_pictures_reach_a_model_that_can_see_them(tmp_path: Path) -> None:
    """Before: an MCP tool's image content reached the model as "[image (image/png) not
    shown]". Now a real picture goes with the result — inside the `tool_result` on the
    Messages API, in a user message after the tool messages on Chat Completions — and an
    "image" whose bytes are not a picture is named, with why."""
    stdio = Server("stdio", tmp_path / "stdio.pid", None)
    clients, registry = await connect(stdio, allowed=["screenshot"])
    try:
        box = Toolbox(registry, ToolContext(TASK))
        [result] = await box.run([call("fake__screenshot", "{}")])
        assert [(i.media_type, i.data) for i in result.images] == [("image/png", SCREENSHOT_PNG)]
        assert "[image 1 (image/png, 69 bytes): attached]" in result.content
        assert "not shown: not a png, jpeg, gif or webp picture" in result.content
        async with AnthropicServer() as claude, OpenAIServer() as server:
            claude.script(
                anthropic_tool_reply("fake__screenshot", {}),
                anthropic_tool_reply("final_reply", {"text": "a shop"}),
            )
            server.script(
                openai_tool_reply("fake__screenshot", {}),
                openai_tool_reply("final_reply", {"text": "a shop"}),
            )
            for url, provider in ((claude.url, "anthropic"), (server.url, "openai")):
                model = open_route(
                    RouteConfig(provider, "seer", url),
                    index=0,
                    settings=ProviderSettings(stream=False),
                )
                try:
                    decision = await run_round(
                        model,
                        [UserMessage("<turn>what does the shop look like?</turn>")],
                        round_controls(
                            final=True, subtasks=SubtaskRegistry(), catalog=ReferenceCatalog()
                        ),
                        toolbox=box,
                    )
                finally:
                    await model.aclose()
                assert isinstance(decision, Reply) and decision.text == "a shop"
        tool_result = claude.requests[1].body["messages"][-1]["content"][0]
        assert tool_result["type"] == "tool_result"
        assert [b["type"] for b in tool_result["content"]] == ["text", "image"]
        after = server.requests[1].body["messages"]
        assert [m["role"] for m in after[-2:]] == ["tool", "user"]
        assert server.requests[1].images() == [("image/png", SCREENSHOT_PNG)]
    finally:
        await clients.aclose()


async def test_a_tools_pdf_reaches_a_model_that_reads_documents(tmp_path: Path) -> None:
    """Before: a PDF an MCP tool returned reached every model as "[binary resource … not
    shown]", and audio as "[audio (audio/wav) not shown]". Now the PDF goes as a document
    block inside the `tool_result` on the Messages API (citations enabled like any
    document), as a `file` part after the tool messages on Chat Completions, and is named
    to a route that reads no documents; a CSV blob is its text; the audio and the archive
    are named with their type and size."""
    stdio = Server("stdio", tmp_path / "stdio.pid", None)
    clients, registry = await connect(stdio, allowed=["report"])
    try:
        box = Toolbox(registry, ToolContext(TASK))
        [result] = await box.run([call("fake__report", "{}")])
        assert [(d.name, d.data) for d in result.documents] == [("report document 1", REPORT_PDF)]
        assert f"[document 1 (application/pdf, {len(REPORT_PDF):,} bytes): attached]" in (
            result.content
        )
        assert "quarter,revenue\nq3,12" in result.content
        assert "[audio (audio/wav, 44 bytes) not shown: no model here hears audio]" in (
            result.content
        )
        assert (
            '[binary resource "file:///reports/q3.zip" (application/zip, 15 bytes) not shown]'
            in (result.content)
        )
        routes = {
            "anthropic": RouteConfig("anthropic", "reader", ""),
            "openai": RouteConfig("openai", "reader", "", capabilities={"documents": True}),
            "blind": RouteConfig("openai", "text-reader", ""),
        }
        async with AnthropicServer() as claude, OpenAIServer() as server:
            claude.script(
                anthropic_tool_reply("fake__report", {}),
                anthropic_tool_reply("final_reply", {"text": "q3 grew"}),
            )
            server.script(
                *[
                    openai_tool_reply("fake__report", {}),
                    openai_tool_reply("final_reply", {"text": "q3 grew"}),
                ]
                * 2
            )
            for name, config in routes.items():
                url = claude.url if name == "anthropic" else server.url
                model = open_route(
                    replace(config, base_url=url), index=0, settings=ProviderSettings(stream=False)
                )
                try:
                    await run_round(
                        model,
                        [UserMessage("<turn>how did q3 go?</turn>")],
                        round_controls(
                            final=True, subtasks=SubtaskRegistry(), catalog=ReferenceCatalog()
                        ),
                        toolbox=box,
                    )
                finally:
                    await model.aclose()
        tool_result = claude.requests[1].body["messages"][-1]["content"][0]
        assert [b["type"] for b in tool_result["content"]] == ["text", "document"]
        document = tool_result["content"][1]
        assert document["title"] == "report document 1"
        assert document["citations"] == {"enabled": True}
        assert claude.requests[1].documents() == [("report document 1", REPORT_PDF)]
        reader, blind = server.requests[1], server.requests[3]
        assert [m["role"] for m in reader.body["messages"][-2:]] == ["tool", "user"]
        assert reader.documents() == [("report document 1.pdf", REPORT_PDF)]
        assert blind.documents() == []
        told = blind.body["messages"][-1]["content"]
        assert 'the document "report document 1"' in told
        assert "this model does not read documents" in told
    finally:
        await clients.aclose()
