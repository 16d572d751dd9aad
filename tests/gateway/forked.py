"""`threadgate` commands for the suite, forked from a pre-loaded interpreter.

Starting an interpreter and loading the gateway was most of the suite's CPU (about two
seconds a command on the CI machine); tests/gateway/zygote.py loads it once per test
worker and forks each command from there. `spawn` asks for one and returns a
`ForkedProcess`, which answers what the suite asked of `asyncio.subprocess.Process`: the
pid, signals, the exit status, and the child's stdin, stdout and stderr as streams.

A forked child is not this process's child but the zygote's: its exit status comes from
the zygote, over the connection that asked for it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

ZYGOTE = Path(__file__).resolve().with_name("zygote.py")
# What the interpreter itself reads from the environment at start: a zygote starts with
# these from the environment it is first given (the same for every command: see
# tests/gateway/process.py `child_env`, tests/fakes/mcp_server.py `stdio_entry`); each
# child then gets its command's whole one.
_INTERPRETER = ("PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH")


class Zygote:
    """A zygote of this process's for `python -m MODULE`, loading `preload` and run in
    `cwd` (None: a folder of its own); started on first use, stopped when this process
    ends."""

    def __init__(self, module: str, preload: Sequence[str], cwd: Path | None = None) -> None:
        self._command = [module, *preload]
        self._cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._address = ""
        # A thread's lock, not asyncio's: each test runs its own event loop.
        self._starting = threading.Lock()

    async def address(self, env: Mapping[str, str]) -> str:
        """Its socket, once it listens: the first call waits for it to load (seconds)."""
        return await asyncio.to_thread(self.ensure, env)

    def ensure(self, env: Mapping[str, str]) -> str:
        """Its socket, started from `env` if it is not running (blocks while it loads)."""
        with self._starting:
            if self._proc is None or self._proc.poll() is not None:
                self._start(env)
            return self._address

    def _start(self, env: Mapping[str, str]) -> None:
        folder = tempfile.mkdtemp(prefix="tg-zygote-")
        self._address = os.path.join(folder, "socket")
        self._proc = subprocess.Popen(
            [sys.executable, str(ZYGOTE), self._address, *self._command],
            env={k: v for k, v in env.items() if k in _INTERPRETER},
            cwd=self._cwd or folder,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._proc.stdout is not None
        if self._proc.stdout.readline() != b"ready\n":
            raise AssertionError(f"the zygote did not start (exit status {self._proc.wait()})")
        atexit.register(self._stop, self._proc)

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes]) -> None:
        """Closing its stdin ends it; the commands it started run on if a test left them."""
        assert proc.stdin is not None
        with contextlib.suppress(OSError):
            proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


# What `serve` loads in HTTP mode and in Socket Mode (the CLI's other commands load less).
GATEWAY = Zygote(
    "gateway.operator",
    [
        "gateway.operator.cli",
        "gateway.process.service",
        "gateway.inbound.socket_mode",
        "uvloop",
    ],
)


class ForkedProcess:
    """A forked `threadgate` command: its pid, its exit status, its three streams."""

    def __init__(
        self,
        pid: int,
        status: asyncio.StreamReader,
        closing: asyncio.StreamWriter,
        stdin: asyncio.StreamWriter | None,
        stdout: asyncio.StreamReader | None,
        stderr: asyncio.StreamReader | None,
    ) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self._status, self._closing = status, closing
        self._waiting = asyncio.Lock()

    async def wait(self) -> int:
        async with self._waiting:
            if self.returncode is None:
                line = await self._status.readline()
                self._closing.close()
                if not line:
                    raise AssertionError(f"the zygote ended before process {self.pid} did")
                self.returncode = int(line)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def communicate(self, input: bytes | None = None) -> tuple[bytes, bytes]:
        """Feed `input` to stdin and close it, read stdout and stderr to their ends, and
        wait for the exit, like `asyncio.subprocess.Process.communicate`."""

        async def feed() -> None:
            if self.stdin is None:
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                if input:
                    self.stdin.write(input)
                    await self.stdin.drain()
            self.stdin.close()

        async def read(stream: asyncio.StreamReader | None) -> bytes:
            return await stream.read() if stream is not None else b""

        _, out, err = await asyncio.gather(feed(), read(self.stdout), read(self.stderr))
        await self.wait()
        return out, err


async def spawn(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    *,
    stdin: bool = False,
    stdout: bool = False,
    stderr: bool = True,
) -> ForkedProcess:
    """Start `python -m gateway.operator ARGS` with exactly `env`, in `cwd`; each stream
    asked for is a pipe, the others /dev/null."""
    address = await GATEWAY.address(env)
    loop = asyncio.get_running_loop()
    ours: list[int | None] = []
    theirs: list[int] = []
    for wanted, reading in ((stdin, False), (stdout, True), (stderr, True)):
        if not wanted:
            ours.append(None)
            theirs.append(os.open(os.devnull, os.O_RDWR))
            continue
        read_end, write_end = os.pipe()
        ours.append(read_end if reading else write_end)
        theirs.append(write_end if reading else read_end)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(address)
        socket.send_fds(conn, [b"\0"], theirs)
        request = {"args": list(args), "env": dict(env), "cwd": str(cwd)}
        conn.sendall(json.dumps(request).encode() + b"\n")
    finally:
        for fd in theirs:
            os.close(fd)
    conn.setblocking(False)
    status, closing = await asyncio.open_unix_connection(sock=conn)
    pid = int(await status.readline())
    return ForkedProcess(
        pid,
        status,
        closing,
        await _writer(loop, ours[0]),
        await _reader(loop, ours[1]),
        await _reader(loop, ours[2]),
    )


async def _reader(loop: asyncio.AbstractEventLoop, fd: int | None) -> asyncio.StreamReader | None:
    if fd is None:
        return None
    reader = asyncio.StreamReader(loop=loop)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(fd, "rb", 0)
    )
    return reader


async def _writer(loop: asyncio.AbstractEventLoop, fd: int | None) -> asyncio.StreamWriter | None:
    if fd is None:
        return None
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop),
        os.fdopen(fd, "wb", 0),
    )
    return asyncio.StreamWriter(transport, protocol, None, loop)
