"""Running `threadgate` as a real child process, for tests that crash or configure it.

A child is hermetic like the test process: its environment is only what the test gives
it (plus what Python needs), its working directory is the test's own temporary directory,
and it runs under the loopback-only socket guard (`tests/netguard`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.gateway.forked import ForkedProcess, spawn

# First on every child's PYTHONPATH: its `sitecustomize.py` installs the socket guard.
NETGUARD = Path(__file__).resolve().parent.parent / "netguard"

# HTTP mode announces its events URL; Socket Mode its health port once connected.
_LISTENING = re.compile(rb"listening on http://[^:]+:(\d+)/|Socket Mode \(health on port (\d+)\)")
# Logged before either, when THREADGATE_METRICS_ADDRESS is not off.
_METRICS = re.compile(rb"metrics on (http://\S+/metrics)")


def child_env(settings: Mapping[str, str]) -> dict[str, str]:
    """Only what the child needs: no stray THREADGATE_* or SLACK_*, and the socket guard."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    # The parent's own PYTHONPATH is not passed on: the child finds threadgate through its
    # installation, like a deployed one, and nothing else may come before the guard.
    guard = {"PYTHONPATH": str(NETGUARD)}
    return {**keep, "THREADGATE_LOG_LEVEL": "INFO", **settings, **guard}


def child_cwd(cwd: Path, *, dotenv: bool = False) -> Path:
    """`cwd`, checked: `threadgate` reads the `.env` of its working directory (as it does in
    production), so a child may only start where none is, unless the test wrote it there
    (`dotenv=True`). Tests pass their `tmp_path`; this catches one that passes, say, the
    repository root, where a developer keeps theirs."""
    if not dotenv and (cwd / ".env").exists():
        raise AssertionError(f"{cwd / '.env'} would configure the child: start it elsewhere")
    return cwd


class GatewayProcess:
    """`threadgate serve` on an ephemeral port; `start` returns once it listens."""

    def __init__(
        self,
        env: Mapping[str, str],
        cwd: Path,
        args: Sequence[str] = (),
        *,
        forked: bool = True,
    ) -> None:
        self._env = child_env(env)
        self._cwd = child_cwd(cwd)
        self._args = list(args)  # more `serve` options, such as `--role worker`
        # False: a started interpreter that loads threadgate from `cwd` first, as
        # `python -m` does. A benchmark's side that runs a checkout of the code before a
        # change needs that: a forked child has the zygote's modules, this checkout's.
        self._forked = forked
        self.proc: ForkedProcess | asyncio.subprocess.Process | None = None
        self.port = 0
        self.log = bytearray()
        self._logged = asyncio.Condition()

    async def start(self, deadline: float = 60) -> None:
        args = ["serve", "--host", "127.0.0.1", "--port", "0", *self._args]
        if self._forked:
            self.proc = await spawn(args, self._env, self._cwd)
        else:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gateway.operator",
                *args,
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
            async with self._logged:
                self._logged.notify_all()

    # The deadline turns a hang into a readable failure, like FakeSlack.wait_for_posts.
    async def wait_for_log(self, pattern: bytes, timeout: float = 30) -> None:  # noqa: ASYNC109
        """Wait, re-checking after every chunk the child writes, until its stderr matches
        `pattern` (a regex); on timeout raise an AssertionError showing the log."""
        regex = re.compile(pattern)
        try:
            async with asyncio.timeout(timeout), self._logged:
                await self._logged.wait_for(lambda: regex.search(self.log) is not None)
        except TimeoutError:
            raise AssertionError(
                f"gateway never logged {pattern!r}:\n{self.log.decode(errors='replace')}"
            ) from None

    @property
    def events_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    @property
    def metrics_url(self) -> str | None:
        """Where the child said it serves /metrics (None if it did not say)."""
        match = _METRICS.search(self.log)
        return match.group(1).decode() if match else None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def peak_rss_kib(self) -> int:
        """The most memory the gateway process has held so far (VmHWM), in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM in /proc: not Linux?")

    def cpu_seconds(self) -> float:
        """CPU the gateway process and its child processes have used: its own, its
        children's that ended (the kernel adds them when they are reaped) and its live
        children's."""
        fields = _stat(self.pid)
        ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        ticks += sum(sum(int(f) for f in _stat(c)[11:13]) for c in _children(self.pid))
        return ticks / os.sysconf("SC_CLK_TCK")

    def running_threads(self) -> list[str]:
        """The threads of the gateway and of its child processes that are running or
        waiting for a CPU (state R), by name; none when the gateway is idle."""
        running = []
        for pid in (self.pid, *_children(self.pid)):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(FileNotFoundError):
                    fields = _stat_file(task / "stat")
                    if fields[0] == "R":
                        running.append(f"{pid}/{task.name}")
        return running

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


def _stat(pid: int) -> list[str]:
    return _stat_file(Path(f"/proc/{pid}/stat"))


def _stat_file(path: Path) -> list[str]:
    """The fields of a /proc stat file after the command name, from the state on."""
    text = path.read_text()
    return text[text.rindex(")") + 2 :].split()


def _children(pid: int) -> list[int]:
    """The live child processes of `pid`."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                if int(_stat(int(entry.name))[1]) == pid:
                    children.append(int(entry.name))
    return children


async def run_cli(
    args: list[str],
    env: Mapping[str, str],
    cwd: Path,
    deadline: float = 60,
    *,
    dotenv: bool = False,
) -> tuple[int, str]:
    """Run `threadgate ARGS` to completion; return its exit status and stderr."""
    status, _, err = await run_cli_output(args, env, cwd, deadline=deadline, dotenv=dotenv)
    return status, err


async def run_cli_output(
    args: list[str],
    env: Mapping[str, str],
    cwd: Path,
    *,
    stdin: bytes | None = None,
    deadline: float = 60,
    dotenv: bool = False,
) -> tuple[int, str, str]:
    """Run `threadgate ARGS` with `stdin` piped in (then closed, as an EOF) to completion;
    return its exit status, stdout and stderr. A child still running at the deadline is
    killed, so a hang fails the test instead of leaking a process. `dotenv=True`: the test
    put a `.env` in `cwd` on purpose, for the child to read."""
    cwd = child_cwd(cwd, dotenv=dotenv)
    proc = await spawn(args, child_env(env), cwd, stdin=True, stdout=True)
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
