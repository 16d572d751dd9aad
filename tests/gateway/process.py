"""Running `threadgate` as a real child process, for tests that crash or configure it."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

# HTTP mode announces its events URL; Socket Mode its health port once connected.
_LISTENING = re.compile(rb"listening on http://[^:]+:(\d+)/|Socket Mode \(health on port (\d+)\)")
# Logged before either, when THREADGATE_METRICS_ADDRESS is not off.
_METRICS = re.compile(rb"metrics on (http://\S+/metrics)")


def child_env(settings: Mapping[str, str]) -> dict[str, str]:
    """Only what the child needs: no developer `.env`, no stray THREADGATE_* or SLACK_*."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {**keep, "THREADGATE_LOG_LEVEL": "INFO", **settings}


class GatewayProcess:
    """`threadgate serve` on an ephemeral port; `start` returns once it listens."""

    def __init__(self, env: Mapping[str, str], cwd: Path) -> None:
        self._env = child_env(env)
        self._cwd = cwd
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0
        self.log = bytearray()

    async def start(self, deadline: float = 60) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            env=self._env,
            cwd=self._cwd,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self.port = await asyncio.wait_for(self._wait_listening(), deadline)

    async def _wait_listening(self) -> int:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.log += line
            if match := _LISTENING.search(line):
                asyncio.get_running_loop().create_task(self._drain())
                return int(match.group(1) or match.group(2))
        raise AssertionError(
            f"gateway exited before listening:\n{self.log.decode(errors='replace')}"
        )

    async def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        # Chunks, not lines: a log line longer than the stream's 64 KiB line limit would
        # end the drain, and a child whose stderr pipe is full blocks on its next log call.
        while chunk := await self.proc.stderr.read(1 << 16):
            self.log += chunk

    @property
    def events_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    @property
    def metrics_url(self) -> str | None:
        """Where the child said it serves /metrics (None if it did not say)."""
        match = _METRICS.search(self.log)
        return match.group(1).decode() if match else None

    async def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), 30)


async def run_cli(
    args: list[str], env: Mapping[str, str], cwd: Path, deadline: float = 60
) -> tuple[int, str]:
    """Run `threadgate ARGS` to completion; return its exit status and stderr."""
    status, _, err = await run_cli_output(args, env, cwd, deadline=deadline)
    return status, err


async def run_cli_output(
    args: list[str],
    env: Mapping[str, str],
    cwd: Path,
    *,
    stdin: bytes | None = None,
    deadline: float = 60,
) -> tuple[int, str, str]:
    """Run `threadgate ARGS` with `stdin` piped in (then closed, as an EOF) to completion;
    return its exit status, stdout and stderr. A child still running at the deadline is
    killed, so a hang fails the test instead of leaking a process."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        *args,
        env=child_env(env),
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin or b""), deadline)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(
            f"threadgate {' '.join(args)} still running after {deadline}s:\n{err.decode()}"
        ) from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
