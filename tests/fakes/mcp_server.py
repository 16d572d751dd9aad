"""A real MCP server for tests, built with the SDK's server API (`MCPServer`).

Run it over stdio (the client spawns it)::

    python -m tests.fakes.mcp_server

or over Streamable HTTP on loopback, at `http://127.0.0.1:PORT/mcp`::

    python -m tests.fakes.mcp_server --http PORT

Tools: `echo` (returns its text), `slow` (sleeps `seconds`, then answers), `huge` (returns
`megabytes` MB of text), `fails` (raises: an `isError` result), `token_is_set` (whether
the server received the token the test configured — never the token itself) and `hidden`
(a tool tests leave out of the allowlist).

Environment: `FAKE_MCP_PIDFILE` — the server writes its pid there at start, so a test can
kill it (the stdio client spawns a new one on reconnect; an HTTP server is started again
by the test). `FAKE_MCP_TOKEN` — over stdio, the value `token_is_set` checks the env var
`FAKE_MCP_GOT_TOKEN` against; over HTTP, the bearer token every request must carry (401
otherwise). Run as a child of the suite, it gets the loopback-only socket guard from the
PYTHONPATH the test gives it (`tests/netguard`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

server = MCPServer("threadgate-fake", log_level="WARNING")


@server.tool(description="Return the text unchanged.")
def echo(text: str) -> str:
    return f"echo: {text}"


@server.tool(description="Sleep for `seconds`, then say so.")
async def slow(seconds: float) -> str:
    await asyncio.sleep(seconds)  # the tool under test is slow on purpose
    return f"slept {seconds} s"


@server.tool(description="Return `megabytes` megabytes of text.")
def huge(megabytes: int) -> str:
    return "x" * (megabytes * 1024 * 1024)


@server.tool(description="Always fail.")
def fails() -> str:
    raise RuntimeError("the fake tool failed on purpose")


@server.tool(description="Whether this server received the configured token (yes or no).")
def token_is_set() -> str:
    expected = os.environ.get("FAKE_MCP_TOKEN")
    got = os.environ.get("FAKE_MCP_GOT_TOKEN")
    return "yes" if expected and got == expected else "no"


@server.tool(description="A tool the tests never allow.")
def hidden() -> str:
    return "this must never be called"


def _require_token(app: Any, token: str) -> Any:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer <token>`."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"missing or wrong token"})
            return
        await app(scope, receive, send)

    return guarded


async def serve_http(port: int) -> None:
    import uvicorn

    app: Any = server.streamable_http_app(host="127.0.0.1")
    if token := os.environ.get("FAKE_MCP_TOKEN"):
        app = _require_token(app, token)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on PORT")
    args = parser.parse_args()
    if pidfile := os.environ.get("FAKE_MCP_PIDFILE"):
        Path(pidfile).write_text(str(os.getpid()))
    if args.http is not None:
        asyncio.run(serve_http(args.http))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()


# -- for tests: the server as a child process ---------------------------------------------

REPO = Path(__file__).resolve().parent.parent.parent
NETGUARD = REPO / "tests" / "netguard"


def stdio_entry(pidfile: Path, **extra: Any) -> dict[str, Any]:
    """A `mcpServers` entry that runs this server over stdio, under the socket guard."""
    env = {"PYTHONPATH": str(NETGUARD), "FAKE_MCP_PIDFILE": str(pidfile), **extra.pop("env", {})}
    return {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_server"],
        "cwd": str(REPO),
        "env": env,
        **extra,
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class HttpServerProcess:
    """This server over Streamable HTTP in a child process, on one port across restarts."""

    def __init__(self, pidfile: Path, token: str | None = None) -> None:
        self.port = free_port()
        self._pidfile = pidfile
        self._token = token
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self, deadline: float = 30) -> None:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env |= {"PYTHONPATH": str(NETGUARD), "FAKE_MCP_PIDFILE": str(self._pidfile)}
        if self._token:
            env["FAKE_MCP_TOKEN"] = self._token
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.fakes.mcp_server",
            "--http",
            str(self.port),
            env=env,
            cwd=REPO,
            stdout=asyncio.subprocess.DEVNULL,
        )
        async with asyncio.timeout(deadline):
            while not await self._listening():
                if self._proc.returncode is not None:
                    raise AssertionError(f"the MCP server exited ({self._proc.returncode})")
                await asyncio.sleep(0.05)  # polling a condition, under the deadline above

    async def _listening(self) -> bool:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", self.port)
        except OSError:
            return False
        writer.close()
        await writer.wait_closed()
        return True

    async def kill(self) -> None:
        """SIGKILL, as in a crash."""
        if self._proc is not None and self._proc.returncode is None:
            self._proc.send_signal(signal.SIGKILL)
            await self._proc.wait()
