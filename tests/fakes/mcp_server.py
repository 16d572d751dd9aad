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
