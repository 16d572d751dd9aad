"""Benchmark: how long erasing an uninstalled workspace takes, and its longest transaction.

A workspace of `THREADS` finished threads (each a task, its turn and reply of 500
characters, a tool call) is erased beside another workspace of the same size, which must
keep every row. The figures are the whole run's seconds, rows per second, and the longest
single batch (the longest a lock is held), as `storage.Erasure` runs it in production
(batches of 500).

    .venv/bin/python -m bench.erasure
"""

from __future__ import annotations

import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench import run as bench_run
from bench.stack import scratch_database
from storage import Database, Erasure, request_erasure
from tests.pg import server_dsn

THREADS = 20_000

# One workspace's threads, made in a few statements ($1 the team, $2 how many).
_FILL = (
    "INSERT INTO sessions (id) SELECT $1 || ':C1:' || g FROM generate_series(1, $2) g",
    "INSERT INTO tasks (id, session_id, address, state, finished_at)"
    " SELECT $1 || ':C1:' || g, $1 || ':C1:' || g, '{}', 'done', now()"
    " FROM generate_series(1, $2) g",
    "INSERT INTO messages (id, session_id, anchor, role, kind, text)"
    " SELECT 'task:' || $1 || ':C1:' || g || ':' || k, $1 || ':C1:' || g, 0,"
    " CASE k WHEN 'user' THEN 'user' ELSE 'assistant' END,"
    " CASE k WHEN 'user' THEN 'turn' ELSE 'reply' END, repeat('x', 500)"
    " FROM generate_series(1, $2) g, (VALUES ('user'), ('reply')) AS v (k)",
    "INSERT INTO tool_calls (task_id, round, call_id, name, arguments, state)"
    " SELECT $1 || ':C1:' || g, 0, 'c', 'n', '{}', 'ok' FROM generate_series(1, $2) g",
)


async def measure(server: str, threads: int = THREADS) -> dict[str, Any]:
    async with (
        scratch_database(server, "bench_erasure") as dsn,
        Database(dsn, min_size=1, max_size=2) as db,
    ):
        for team in ("T1", "T2"):
            for statement in _FILL:
                await db.pool.execute(statement, team, threads)
        await db.pool.execute("ANALYZE")
        await request_erasure(db, "T1", reason="bench")
        started = time.perf_counter()
        run = await Erasure(db, settle=timedelta(0), on_deleted=lambda t, n: None).run("T1")
        seconds = time.perf_counter() - started
        assert run is not None
        kept = await db.pool.fetchval("SELECT count(*) FROM messages")
        longest = await _longest_batch(db)
    rows = sum(run.deleted.values())
    assert kept == 2 * threads, kept
    return {
        "threads": threads,
        "rows": rows,
        "seconds": round(seconds, 2),
        "rows_per_second": round(rows / seconds),
        "longest_batch_ms": round(longest * 1000, 1),
    }


async def _longest_batch(db: Database) -> float:
    """The slowest batch of the other workspace's erasure, timed one statement at a time
    (the production run does not time its batches)."""
    from storage.erasure import _TASKS, WORKSPACE_TABLES, _count
    from storage.retention import DEFAULT_BATCH, TASK_ROWS

    longest = 0.0
    async with db.pool.acquire() as conn:
        while True:
            started = time.perf_counter()
            async with conn.transaction():
                ids = [r["id"] for r in await conn.fetch(_TASKS, "T2", DEFAULT_BATCH)]
                for _, statement in TASK_ROWS:
                    await conn.execute(statement, ids)
            longest = max(longest, time.perf_counter() - started)
            if len(ids) < DEFAULT_BATCH:
                break
        for scoped in WORKSPACE_TABLES:
            while True:
                started = time.perf_counter()
                count = _count(await conn.execute(scoped.statement, "T2", DEFAULT_BATCH))
                longest = max(longest, time.perf_counter() - started)
                if count < DEFAULT_BATCH:
                    break
    return longest


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print(f"  erasure: {await measure(await server_dsn(Path(tmp)))}", flush=True)


if __name__ == "__main__":
    bench_run(main())
