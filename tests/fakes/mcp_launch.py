"""Starts the fake MCP server (tests/fakes/mcp_server.py) for a client that spawns it over
stdio, forked from the suite's pre-loaded MCP zygote instead of a new interpreter.

The client (the gateway's MCP client, or a test's) runs this script with `python -S`:
the standard library only, so it starts in milliseconds. It hands its own stdin, stdout
and stderr, arguments, environment and folder to the zygote whose socket
`FAKE_MCP_ZYGOTE` names (tests/gateway/zygote.py), which forks `python -m
tests.fakes.mcp_server` with them, and then stands in for that server to the client:
SIGTERM, SIGINT and SIGHUP are passed on, and it exits as the server did (by the same
signal, if one ended it). Killed itself (SIGKILL cannot be passed on), it takes the server
with it: the server watches it and exits when it does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys


def main() -> None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ["FAKE_MCP_ZYGOTE"])
    socket.send_fds(conn, [b"\0"], [0, 1, 2])
    request = {
        "args": sys.argv[1:],
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "watch": os.getpid(),
    }
    conn.sendall(json.dumps(request).encode() + b"\n")
    answers = conn.makefile("rb")
    server = int(answers.readline())

    def pass_on(signum: int, _: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, pass_on)
    status = answers.readline()
    code = int(status) if status else -signal.SIGKILL  # the zygote is gone
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
