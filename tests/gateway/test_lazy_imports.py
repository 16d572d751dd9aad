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


def _loaded_otel(settings: dict[str, str]) -> str:
    """Which OpenTelemetry modules a process holds once the CLI is imported and the
    gateway's tracer started with `settings`."""
    probe = (
        "import sys, contextlib, gateway.process.cli; "
        "from gateway.process.config import load_settings; "
        "from gateway.process.service import start_tracer; "
        f"settings = load_settings(env_file=None, **{settings!r}); "
        "stack = contextlib.AsyncExitStack(); "
        "tracer = start_tracer(settings, stack); "
        "print(type(tracer).__name__, sorted(m for m in sys.modules if m.startswith('opentelemetry'))[:1])"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return loaded.stdout.strip()


def test_a_start_without_an_otlp_endpoint_loads_no_opentelemetry() -> None:
    """Tracing off is the tracer that records nothing, and no OpenTelemetry module at all;
    with an endpoint the SDK is loaded, and only then."""
    assert _loaded_otel({}) == "NoTracer []"
    on = _loaded_otel({"otel_exporter_otlp_endpoint": "http://127.0.0.1:4318"})
    assert on.startswith("OtelTracer ['opentelemetry")
