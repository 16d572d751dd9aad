"""What every benchmark stands on: the Postgres server, the loopback fakes, the gateway.

The gateway is a real `threadgate serve` child process (so it has a pid for py-spy and an
RSS of its own); Slack and the model are loopback fakes in the benchmark process. Each
measurement gets a fresh database on one shared server, so runs never see each other's rows,
dropped when it ends (`scratch_database`). The server's own background work on a database
(autovacuum) is counted in every later run's Postgres CPU: after the throughput run left
thousands of tasks unanswered at a rate it could not sustain, the next run's Postgres CPU
per event read up to a quarter higher than the runs after it, in 2 of 4 `make bench`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

from bench.loadgen import TimedSlack
from tests.fakes.openai_api import OpenAIServer, RecordedRequest, Reply
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database, drop_database

Model = Callable[[RecordedRequest], Reply]

# Load comes from one fake user in a few threads: far past the per-user and per-thread
# limits a real workspace needs, and those limits are not what is measured.
NO_GUARD_RAILS = {
    "THREADGATE_USER_MESSAGES_PER_HOUR": "0",
    "THREADGATE_THREAD_MESSAGES_PER_HOUR": "0",
    "THREADGATE_USER_DAILY_TOKENS": "0",
    "THREADGATE_CHANNEL_DAILY_TOKENS": "0",
}


@contextlib.asynccontextmanager
async def fakes(model: Model = echo) -> AsyncIterator[tuple[TimedSlack, OpenAIServer]]:
    """A timed fake Slack and a fake OpenAI answering with `model` (default: echo at once)."""
    async with TimedSlack(bot_token=BOT_TOKEN) as slack, OpenAIServer() as server:
        slack.add_user("U0A1B2C3D4E", name="ada", display_name="Ada")
        server.default = model
        yield slack, server


@contextlib.asynccontextmanager
async def scratch_database(server_dsn: str, label: str) -> AsyncIterator[str]:
    """A fresh database named after `label` on `server_dsn`, dropped on exit (with whatever
    connections are still open on it: a gateway killed, not stopped)."""
    dsn = await create_database(server_dsn, label)
    try:
        yield dsn
    finally:
        await drop_database(dsn)


@contextlib.asynccontextmanager
async def gateway(
    server_dsn: str,
    label: str,
    slack: TimedSlack,
    model: OpenAIServer,
    data: Path,
    overrides: Mapping[str, str] | None = None,
) -> AsyncIterator[GatewayProcess]:
    """`threadgate serve` on a fresh database named after `label`; stopped on exit, and the
    database dropped."""
    async with scratch_database(server_dsn, f"bench_{label}") as dsn:
        env = {**gateway_env(slack, model, dsn), **NO_GUARD_RAILS, **(overrides or {})}
        process = GatewayProcess(env, data)
        await process.start()
        try:
            yield process
        finally:
            await stop(process)


async def stop(process: GatewayProcess) -> None:
    """SIGTERM, and SIGKILL if it has not exited within 10 s (e.g. a model held open)."""
    try:
        async with asyncio.timeout(10):
            await process.stop()
    except TimeoutError:
        await process.kill()


def database_url(process: GatewayProcess) -> str:
    return process._env["DATABASE_URL"]


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
