"""A `threadgate` command that uses no MCP server does not import the MCP SDK (a large part
of every start) nor jsonschema-rs: `agent.rounds.mcp_session` and
`agent.rounds.mcp_schemas` load them once a server is connected."""

from __future__ import annotations

import subprocess
import sys

import agent

HEAVY = ("mcp", "mcp_types", "httpx2", "jsonschema", "jsonschema_rs")


def test_the_cli_and_the_agent_surface_load_no_mcp_sdk() -> None:
    """Importing the CLI (and with it `agent`, McpClients included) leaves them out."""
    probe = (
        "import sys, gateway.process.cli, agent; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert loaded.stdout.strip() == ""
    assert {"McpClients", "McpTool", "McpServerState", "Backoff", "Connecting"} <= set(
        agent.__all__
    )
