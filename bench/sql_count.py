"""Benchmark: SQL statements per task, one-round and delegating, counted by the server.

Counted with `pg_stat_statements` on a private embedded server started for this purpose
(the wheel ships the extension; `shared_preload_libraries` is set with ALTER SYSTEM and
the server restarted). The server sees every statement the gateway sends on every
connection — the admission transaction, the worker's claims and appends, the outbox, the
LISTEN connection, and the BEGIN/COMMIT around them (`track_utility` is on) — without
touching our code. Background statements (idle workers polling, lease upkeep) are
measured over an idle window of the same length and subtracted. The benchmark's own probe
queries carry a `bench-probe` comment and are left out.

    .venv/bin/python -m bench.sql_count
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import asyncpg

from agent.rounds.subagent import SUBAGENT_PROMPT
from bench import loadgen
from bench import run as bench_run
from bench.stack import Model, database_url, fakes, gateway
from storage.embedded import start_embedded_postgres
from tests.fakes.openai_api import RecordedRequest, Reply, reply_with_tool
from tests.gateway.rig import echo
from tests.pg import with_database

TASKS = 20
_OPEN = "SELECT /* bench-probe */ count(*) FROM tasks WHERE state NOT IN ('done', 'failed')"
_CALLS = """
SELECT query, calls FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND query NOT LIKE '%bench-probe%'
ORDER BY calls DESC
"""


def delegating(seen: RecordedRequest) -> Reply:
    """Round 0 delegates two sub-agents; they answer; round 1 replies."""
    messages = seen.body["messages"]
    if messages[0]["content"] == SUBAGENT_PROMPT:
        return reply_with_tool("final_reply", {"text": "a finding"})
    if messages[-1]["role"] == "tool":
        return reply_with_tool("final_reply", {"text": "the summary"})
    subtasks = [{"type": "agent", "params": {"instructions": f"part {n}"}} for n in (1, 2)]
    return reply_with_tool("delegate", {"acknowledgment": "On it…", "subtasks": subtasks})


def _restart(pgdata: Path) -> None:
    from embedded_postgres._commands import pg_ctl

    user = "embedded_postgres" if os.geteuid() == 0 else None
    pg_ctl(["-w", "-m", "fast", "restart"], pgdata=pgdata, user=user, timeout=30)


async def counting_server(data: Path) -> str:
    """A private embedded server with pg_stat_statements loaded; returns its DSN."""
    dsn = await start_embedded_postgres(data)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    finally:
        await conn.close()
    await asyncio.to_thread(_restart, (data / "pgdata").resolve())
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    finally:
        await conn.close()
    return dsn


async def settle(db: asyncpg.Connection) -> None:
    """Wait (up to 60 s) until no task is open."""
    for _ in range(1200):
        if not await db.fetchval(_OPEN):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("tasks still open after 60 s")


async def calls(admin: asyncpg.Connection, name: str) -> list[tuple[str, int]]:
    return [(r["query"], r["calls"]) for r in await admin.fetch(_CALLS, name)]


async def per_task(
    server: str, data: Path, label: str, model: Model, overrides: dict[str, str] | None = None
) -> dict[str, Any]:
    async with (
        fakes(model) as (slack, fake),
        gateway(server, label, slack, fake, data, overrides) as gw,
    ):
        url = database_url(gw)
        name = urllib.parse.urlsplit(url).path.lstrip("/")
        admin = await asyncpg.connect(with_database(server, "postgres"))
        db = await asyncpg.connect(url)
        try:
            await loadgen.open_loop(gw.events_url, 5, 3)
            await settle(db)
            await admin.execute("SELECT pg_stat_statements_reset()")
            started = time.perf_counter()
            await loadgen.open_loop(gw.events_url, 10, TASKS)
            await settle(db)
            elapsed = time.perf_counter() - started
            loaded = await calls(admin, name)
            await admin.execute("SELECT pg_stat_statements_reset()")
            await asyncio.sleep(elapsed)
            idle = await calls(admin, name)
        finally:
            await db.close()
            await admin.close()
    total, background = sum(c for _, c in loaded), sum(c for _, c in idle)
    return {
        "tasks": TASKS,
        "statements": total,
        "background": background,
        "per_task": (total - background) / TASKS,
        "top": [(" ".join(q.split())[:90], c / TASKS) for q, c in loaded[:12]],
    }


async def run_all(data: Path) -> dict[str, Any]:
    server = await counting_server(data / "counting")
    return {
        "one_round": await per_task(server, data, "sql_one", echo),
        "delegating": await per_task(server, data, "sql_deleg", delegating),
        # Streaming is the default; the two above post whole, as the benchmarks before did.
        "streamed": await per_task(
            server, data, "sql_stream", echo, {"THREADGATE_STREAMING": "true"}
        ),
    }


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        result = await run_all(Path(tmp))
    for kind, figures in result.items():
        print(kind, {k: v for k, v in figures.items() if k != "top"})
        for query, per in figures["top"]:
            print(f"   {per:5.2f}  {query}")


if __name__ == "__main__":
    bench_run(main())
