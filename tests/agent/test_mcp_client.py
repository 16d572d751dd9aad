"""How threadgate behaves as an MCP client, against the real fake server
(`tests/fakes/mcp_server.py`) over stdio: it says who it is, sends a progress token and
passes each report on while the call runs, does not offer a tool that runs only as an MCP
task, and logs a tool's own error as one line (a bug of ours keeps its traceback)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agent import (
    Backoff,
    Connecting,
    McpClients,
    Task,
    Toolbox,
    ToolCall,
    ToolContext,
    ToolFailed,
    ToolProgress,
    ToolRegistry,
    WorkTool,
    parse_mcp_config,
)
from agent.rounds.tools import LOGGED_ERROR_CHARS, builtin_tools, one_line
from tests.agent.tool_records import Recorder
from tests.fakes.mcp_server import stdio_entry

TASK = Task("T1", "S1", {})


async def eventually(condition: Callable[[], bool], timeout: float = 30) -> None:  # noqa: ASYNC109
    """Wait until `condition()` holds, checking every 20 ms, failing at the deadline."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - what a child process did, polled
            await asyncio.sleep(0.02)


@pytest.fixture
async def fake(tmp_path: Path) -> AsyncIterator[tuple[McpClients, ToolRegistry]]:
    """The fake server over stdio, connected, every tool allowed."""
    raw = {"mcpServers": {"fake": stdio_entry(tmp_path / "pid")}}
    registry = builtin_tools()
    clients = McpClients(parse_mcp_config(raw, {}), registry, Connecting(Backoff(0.05, 0.5)))
    clients.start()
    await clients.wait_settled(60)
    assert clients.connections[0].connected, clients.states()
    try:
        yield clients, registry
    finally:
        await clients.aclose()


def call(name: str, arguments: dict[str, Any] | None = None) -> ToolCall:
    return ToolCall.from_raw(f"call-{name}", name, json.dumps(arguments or {}))


async def test_the_server_is_told_threadgate_and_its_version(
    fake: tuple[McpClients, ToolRegistry],
) -> None:
    """The `clientInfo` the server received names threadgate and the installed version,
    not the SDK's default `mcp 0.1.0`."""
    _, registry = fake
    [result] = await Toolbox(registry, ToolContext(TASK)).run([call("fake__client_info")])
    assert json.loads(result.content) == {
        "name": "threadgate",
        "version": metadata.version("threadgate"),
    }


async def test_progress_reaches_the_observer_while_the_call_runs(
    fake: tuple[McpClients, ToolRegistry], tmp_path: Path
) -> None:
    """Each progress notification is told as a "running" record with the server's numbers
    and message while the tool still runs; then the call ends as usual."""
    _, registry = fake
    recorder = Recorder()
    gate = tmp_path / "gate"
    box = Toolbox(registry, ToolContext(TASK, observer=recorder))
    running = asyncio.create_task(
        box.run([call("fake__progress", {"steps": 3, "gate": str(gate)})])
    )
    await eventually(lambda: any(p.progress == 3 for p in recorder.progress))
    assert not running.done()  # the tool waits for the gate: what was seen, was seen live
    gate.touch()
    [result] = await running
    assert result.content == "done after 3 steps"
    assert recorder.progress[-1] == ToolProgress(3, 3, "step 3 of 3")
    assert [p.progress for p in recorder.progress] == sorted(p.progress for p in recorder.progress)
    assert [r.state for r in recorder.records if r.progress is None] == ["running", "ok"]
    assert recorder.records[-1].state == "ok"


async def test_a_tool_that_runs_only_as_a_task_is_not_offered(
    fake: tuple[McpClients, ToolRegistry],
) -> None:
    """`needs_task` (taskSupport: required) is neither offered nor counted among the
    server's tools; the reason is kept for `doctor`; the others are offered."""
    clients, registry = fake
    box = Toolbox(registry, ToolContext(TASK))
    assert "fake__needs_task" not in box and "fake__echo" in box
    [state] = clients.states()
    assert "fake__needs_task" not in state.tools
    [(name, why)] = state.skipped
    assert name == "needs_task" and "taskSupport: required" in why


async def test_the_skipped_tools_are_logged_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One warning names the tool and why at connection; a reconnection that lists the
    same tools says nothing more."""
    raw = {"mcpServers": {"fake": stdio_entry(tmp_path / "pid")}}
    # Pinged twice a second, so the killed server is found gone at once, not at 15 s.
    keeping = Connecting(Backoff(0.05, 0.5), ping_seconds=0.5)
    clients = McpClients(parse_mcp_config(raw, {}), builtin_tools(), keeping)
    caplog.set_level(logging.INFO, logger="agent.rounds.mcp_tools")
    clients.start()
    try:
        await eventually(lambda: clients.connections[0].connected)
        os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)  # respawned by the client
        await eventually(lambda: _count(caplog, "MCP server fake connected") == 2)
    finally:
        await clients.aclose()
    [warning] = [r for r in caplog.records if "not offering" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert "needs_task (it runs only as an MCP task" in warning.getMessage()


def _count(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


async def test_a_tool_error_is_one_log_line_without_a_traceback(
    fake: tuple[McpClients, ToolRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    """An `isError` result is logged once, naming the tool, its server and the error, with
    no traceback; the model still reads the error text."""
    _, registry = fake
    caplog.set_level(logging.WARNING, logger="agent.rounds.tools")
    [result] = await Toolbox(registry, ToolContext(TASK)).run([call("fake__fails")])
    assert result.is_error and "fake__fails failed: McpToolError:" in result.content
    [record] = [r for r in caplog.records if r.name == "agent.rounds.tools"]
    assert record.exc_info is None and "\n" not in record.getMessage()
    assert "fake__fails (MCP server fake, tool fails) failed:" in record.getMessage()


class BrokenInput(BaseModel):
    pass


class Broken(WorkTool[BrokenInput]):
    """A tool with a bug of ours in it."""

    name = "broken"
    description = "Always raises KeyError."
    input_model = BrokenInput

    async def execute(self, context: ToolContext, input: BrokenInput) -> str:
        return {}["missing"]  # type: ignore[no-any-return]


class Refusing(WorkTool[BrokenInput]):
    """A tool whose service says no, at length."""

    name = "refusing"
    description = "Always refused."
    input_model = BrokenInput

    async def execute(self, context: ToolContext, input: BrokenInput) -> str:
        raise ToolFailed("no\nway " + "x" * 1000, source="the ticket service")


async def test_a_bug_keeps_its_traceback_and_a_refusal_is_cut_to_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tool that raises KeyError is logged with its traceback; a `ToolFailed` a
    thousand characters long is one line, cut, naming its source."""
    caplog.set_level(logging.WARNING, logger="agent.rounds.tools")
    box = Toolbox(ToolRegistry([Broken(), Refusing()]), ToolContext(TASK))
    broken, refused = await box.run([call("broken"), call("refusing")])
    assert broken.is_error and refused.is_error
    bug, refusal = caplog.records
    assert bug.exc_info is not None and bug.exc_info[0] is KeyError
    assert refusal.exc_info is None
    message = refusal.getMessage()
    assert message.startswith("tool refusing (the ticket service) failed: no way xxx")
    assert "\n" not in message and len(message) < LOGGED_ERROR_CHARS + 100
    assert message.endswith("… [1,007 characters]")


def test_one_line_keeps_short_text_whole() -> None:
    """A short message is kept as written, its line breaks made spaces."""
    assert one_line("the server said\nno") == "the server said no"


class Reporting(WorkTool[BrokenInput]):
    """A tool that reports progress, keeps its reporter, and returns."""

    name = "reporting"
    description = "Reports 2, then 1 (going back), then returns."
    input_model = BrokenInput
    reporter: Any = None

    async def execute(self, context: ToolContext, input: BrokenInput) -> str:
        assert context.progress is not None
        Reporting.reporter = context.progress
        await context.progress(ToolProgress(2, 4))
        await context.progress(ToolProgress(1, 4))
        return "done"


async def test_progress_that_goes_back_or_comes_late_is_not_shown() -> None:
    """A report lower than the last one, or made after the call returned, is dropped: a
    card never goes back to "in progress" once it shows the outcome."""
    recorder = Recorder()
    box = Toolbox(ToolRegistry([Reporting()]), ToolContext(TASK, observer=recorder))
    await box.run([call("reporting")])
    await Reporting.reporter(ToolProgress(3, 4))  # after the end
    assert recorder.progress == [ToolProgress(2, 4)]
    assert [r.state for r in recorder.records] == ["running", "running", "ok"]
