"""A `threadgate` command that uses no MCP server does not import the MCP SDK (a large part
of every start) nor jsonschema-rs: `agent.rounds.mcp_session` and
`agent.rounds.mcp_schemas` load them once a server is connected. And a command that serves
nothing does not import the gateway's wiring (gateway/operator/cli.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import agent
from tests.gateway.process import child_cwd, child_env

HEAVY = ("mcp", "mcp_types", "httpx2", "jsonschema", "jsonschema_rs")


def test_the_cli_and_the_agent_surface_load_no_mcp_sdk() -> None:
    """Importing the CLI (and with it `agent`, McpClients included) leaves them out."""
    probe = (
        "import sys, gateway.operator.cli, agent; "
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
        "import sys, contextlib, gateway.operator.cli; "
        "from gateway.config.settings import load_settings; "
        "from gateway.process.resources import start_tracer; "
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


# What `serve` needs and the short commands do not: the composition root, and with it the
# Slack app, the HTTP server and the task runner.
SERVING = ("gateway.process.service", "slack_bolt", "gateway.inbound.bolt_app")


@pytest.mark.parametrize(
    "args",
    [["manifest", "--socket"], ["migrate"], ["tasks", "list"], ["feedback"]],
    ids=lambda args: args[0],
)
def test_a_command_that_serves_nothing_loads_no_gateway(
    args: list[str], database_dsn: str, tmp_path: Path
) -> None:
    """`manifest`, `migrate`, `tasks` and `feedback` run to the end without importing the
    composition root (`threadgate serve` alone needs it)."""
    probe = (
        "import sys; from gateway.operator.cli import main; status = main(sys.argv[1:]); "
        f"print('loaded:', ','.join(m for m in {SERVING!r} if m in sys.modules)); "
        "sys.exit(status)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *args],
        env=child_env({"DATABASE_URL": database_dsn}),
        cwd=child_cwd(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "loaded: "
