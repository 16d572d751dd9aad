"""The suite's forked commands (tests/gateway/zygote.py) behave as started ones: the same
output and exit status as `python -m gateway.operator`, their own pid and signals, and
whatever goes wrong in a child stays in that child; a forked MCP server lives and ends
with the launcher its client started."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from tests.fakes import WAIT_SECONDS
from tests.fakes.mcp_server import stdio_entry
from tests.gateway.forked import spawn
from tests.gateway.process import GatewayProcess, child_env, run_cli_output


async def test_a_forked_command_prints_and_exits_as_a_started_one(tmp_path: Path) -> None:
    """`manifest` forked and `manifest` started: the same stdout, stderr and status; and a
    wrong argument's status (2, argparse's) the same too."""
    for args in (["manifest", "--socket"], ["no-such-command"]):
        forked = await run_cli_output(args, {}, tmp_path)
        started = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "gateway.operator", *args],
            env=child_env({}),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert forked == (started.returncode, started.stdout, started.stderr)
    assert forked[0] == 2


async def test_a_signal_ends_the_child_alone_and_its_status_says_so(tmp_path: Path) -> None:
    """A forked child SIGKILLed reports -9, like `subprocess`; the next command forks
    from the same zygote and runs."""
    child = await spawn(["console"], child_env({}), tmp_path, stdin=True)
    assert child.returncode is None
    child.kill()
    assert await asyncio.wait_for(child.wait(), 30) == -signal.SIGKILL
    status, out, _ = await run_cli_output(["manifest"], {}, tmp_path)
    assert status == 0 and "slash_commands" in out


async def test_a_child_that_cannot_start_exits_without_harming_the_zygote(tmp_path: Path) -> None:
    """A working folder that does not exist: that child exits 1 with the reason on its
    stderr, and the zygote goes on forking."""
    child = await spawn(["manifest"], child_env({}), tmp_path / "gone")
    _, err = await child.communicate()
    assert child.returncode == 1 and b"FileNotFoundError" in err
    status, _, _ = await run_cli_output(["manifest"], {}, tmp_path)
    assert status == 0


async def test_a_forked_mcp_server_ends_with_its_launcher(tmp_path: Path) -> None:
    """The fake MCP server forked for a client (tests/fakes/mcp_launch.py): SIGKILL the
    process the client started and the server it stood for is gone too; SIGTERM it and it
    ends by SIGTERM, as the server did."""
    for signum in (signal.SIGKILL, signal.SIGTERM):
        entry = stdio_entry(tmp_path / f"pid-{signum}")
        launcher = await asyncio.create_subprocess_exec(
            entry["command"],
            *entry["args"],
            env=entry["env"],
            cwd=entry["cwd"],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        pidfile = tmp_path / f"pid-{signum}"
        async with asyncio.timeout(WAIT_SECONDS):
            while not pidfile.exists() or not pidfile.read_text():  # noqa: ASYNC110 - a child's file
                await asyncio.sleep(0.05)
        server = int(pidfile.read_text())
        assert server != launcher.pid
        launcher.send_signal(signum)
        assert await asyncio.wait_for(launcher.wait(), WAIT_SECONDS) == -signum
        async with asyncio.timeout(WAIT_SECONDS):
            while alive(server):  # noqa: ASYNC110 - another process's end, polled
                await asyncio.sleep(0.05)


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


async def test_a_started_gateway_runs_the_code_of_its_folder(tmp_path: Path) -> None:
    """`GatewayProcess(forked=False)`, as the benchmarks start the code before a change from
    its checkout: `python -m gateway.operator` in that folder runs the folder's package, not
    the one this process (and the zygote) loaded. A stand-in package says a port of its own."""
    operator = tmp_path / "gateway" / "operator"
    operator.mkdir(parents=True)
    (tmp_path / "gateway" / "__init__.py").write_text("")
    (operator / "__init__.py").write_text("")
    (operator / "__main__.py").write_text(
        "import sys, time\n"
        "print('listening on http://127.0.0.1:4321/', file=sys.stderr, flush=True)\n"
        "time.sleep(60)\n"
    )
    process = GatewayProcess({}, tmp_path, forked=False)
    await process.start()
    try:
        assert process.port == 4321
    finally:
        assert process.proc is not None
        process.proc.kill()
        await process.proc.wait()
