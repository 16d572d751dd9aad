"""A stdio MCP server runs where the README says: with the variables its config names and
a minimal safe set, none of the gateway's secrets, in a working directory of its own."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from agent import Backoff, Connecting, McpClients, Toolbox, ToolCall, ToolContext, parse_mcp_config
from agent.rounds.tools import builtin_tools
from tests.agent.test_mcp_tools import TASK
from tests.fakes.mcp_server import NETGUARD, REPO

# The SDK's safe set, and what Python itself may set in a child (PEP 538's coercion).
SAFE = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LC_CTYPE"}
GATEWAY_SECRETS = {
    "SLACK_BOT_TOKEN": "xoxb-2718281828-3141592653-liveBotTokenValue",
    "THREADGATE_TOKEN_KEY": "Zm9yLXRoZS10ZXN0LW9ubHktMzItYnl0ZXMtbG9uZyE=",
    "DATABASE_URL": "postgresql://app:livePassword@127.0.0.1:1/db",
}


async def surroundings(entry: dict[str, object]) -> dict[str, Any]:
    """What the fake server reports about where it runs, once connected with `entry`."""
    config = parse_mcp_config({"mcpServers": {"fake": entry}}, {})
    registry = builtin_tools()
    clients = McpClients(config, registry, Connecting(Backoff(0.05, 0.5)))
    clients.start()
    try:
        await clients.wait_settled(60)
        assert clients.connections[0].connected, clients.states()
        box = Toolbox(registry, ToolContext(TASK))
        (result,) = await box.run([ToolCall.from_raw("c1", "fake__surroundings", "{}")])
        return dict(json.loads(result.content))
    finally:
        await clients.aclose()


def entry(**extra: object) -> dict[str, object]:
    """The fake server over stdio, found through PYTHONPATH (not the working directory)."""
    env = {"PYTHONPATH": os.pathsep.join([str(NETGUARD), str(REPO)]), "SERVER_SETTING": "on"}
    return {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_server"],
        "env": env,
        "allowedTools": ["surroundings"],
        **extra,
    }


async def test_a_stdio_server_gets_no_secret_and_a_directory_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the gateway's secrets in its environment and a `.env` in its working directory,
    the server sees only its config's variables and the safe set, and runs in a private
    directory of its own (no `.env` there), removed when it stops."""
    for name, value in GATEWAY_SECRETS.items():
        monkeypatch.setenv(name, value)
    (tmp_path / ".env").write_text("".join(f"{k}={v}\n" for k, v in GATEWAY_SECRETS.items()))
    monkeypatch.chdir(tmp_path)
    seen = await surroundings(entry())
    assert set(seen["env"]) <= SAFE | {"PYTHONPATH", "SERVER_SETTING"}
    assert "SERVER_SETTING" in seen["env"]
    own = Path(str(seen["cwd"]))
    assert own != tmp_path and own.name.startswith("threadgate-mcp-fake-")
    assert seen["dotenv"] is False
    assert not await asyncio.to_thread(own.exists)  # removed once the connection closed


async def test_a_configured_working_directory_is_kept(tmp_path: Path) -> None:
    """`cwd` in the config is where the server runs, as before."""
    chosen = tmp_path / "docs"
    chosen.mkdir()
    seen = await surroundings(entry(cwd=str(chosen)))
    assert Path(str(seen["cwd"])) == chosen and await asyncio.to_thread(chosen.exists)
