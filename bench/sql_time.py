"""Benchmark: Postgres's time per answered event, by statement, under bench/ack_pairs.py's load.

bench/sql_count.py counts statements per task at a gentle 10 events/s of new threads;
this one asks where Postgres's CPU goes at the rate the CPU targets are measured at: the
same 400 events (100 threads × 4 mentions, streaming on) at `--rate`, against a private
embedded server with `pg_stat_statements` loaded and its planning tracked. Per answered
event, for each statement: how often it ran, its execution and planning time (ms), and its
rows; then the server's whole CPU per event (as bench/ack_pairs.py reads it) beside the
statements' sum, whose gap is the rest of a backend's work (parsing, the protocol,
commits, locks). With `--code DIR` the checkout in DIR runs too, in alternated order.

    .venv/bin/python -m bench.sql_time [--rate 100] [--runs 1] [--code DIR] [--top 15]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

import asyncpg

from bench import cpu, loadgen
from bench import run as bench_run
from bench.ack_pairs import EVENTS, STREAMING
from bench.sender import send_apart
from bench.sql_count import counting_server
from bench.stack import NO_GUARD_RAILS, fakes, scratch_database, stop
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import gateway_env
from tests.pg import with_database

_STATEMENTS = """
SELECT query, calls, total_exec_time, total_plan_time, rows FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)
ORDER BY total_exec_time + total_plan_time DESC
"""


# As bench/ack_pairs.py's server is set (tests/pg.py): without fsync and synchronous commits,
# whose waits would read as the time of whichever statement holds a hot row's lock; and
# planning time tracked (off by default), so a statement planned at every execution shows.
_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "autovacuum": "off",
    "pg_stat_statements.track_planning": "on",
}


async def configure(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for name, value in _SETTINGS.items():
            await conn.execute(f"ALTER SYSTEM SET {name} = {value}")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


async def run_side(
    server: str, label: str, code: Path | None, data: Path, rate: int
) -> dict[str, Any]:
    """One gateway (from `code`; None: this checkout) on a fresh database, measured."""
    async with fakes() as (slack, model), scratch_database(server, f"sqlt_{label}") as db:
        env = {**gateway_env(slack, model, db), **NO_GUARD_RAILS, **STREAMING}
        process = GatewayProcess(env, code or data, forked=False)
        await process.start()
        try:
            assert process.proc is not None
            return await measure(process.events_url, slack, server, db, rate)
        finally:
            await stop(process)


async def measure(url: str, slack: loadgen.TimedSlack, server: str, db: str, rate: int) -> Any:
    await loadgen.open_loop(url, 20, 20, loadgen.mention)  # warm-up, own threads
    await loadgen.wait_answered_count(slack, 20, deadline=60)
    name = urllib.parse.urlsplit(db).path.lstrip("/")
    admin = await asyncpg.connect(with_database(server, "postgres"))
    try:
        await admin.execute("SELECT pg_stat_statements_reset()")
        before = sum(slack.post_count.values())
        pg0 = cpu.postgres_cpu(server)
        events = cpu.events(EVENTS)
        with loadgen.no_pauses():
            samples = await send_apart(url, rate, [events(n) for n in range(EVENTS)])
            await loadgen.wait_answered_count(slack, before + len(samples), deadline=120)
        pg1 = cpu.postgres_cpu(server)
        rows = await admin.fetch(_STATEMENTS, name)
    finally:
        await admin.close()
    answered = max(sum(slack.post_count.values()) - before, 1)
    return summarize(rows, answered, (pg1 - pg0) * 1000 / answered)


def summarize(rows: list[asyncpg.Record], answered: int, cpu_ms: float) -> dict[str, Any]:
    per = [
        {
            "statement": " ".join(r["query"].split())[:110],
            "calls": round(r["calls"] / answered, 2),
            "exec_ms": round(r["total_exec_time"] / answered, 3),
            "plan_ms": round(r["total_plan_time"] / answered, 3),
            "rows": round(r["rows"] / answered, 2),
        }
        for r in rows
    ]
    return {
        "answered": answered,
        "postgres_cpu_ms": round(cpu_ms, 2),
        "statements_ms": round(sum(s["exec_ms"] + s["plan_ms"] for s in per), 2),
        "statements": round(sum(s["calls"] for s in per), 1),
        "by_statement": per,
    }


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        server = await counting_server(data / "counting")
        await configure(server)
        sides: list[tuple[str, Path | None]] = [("after", None)]
        if args.code:
            sides.insert(0, ("before", args.code))
        for run in range(args.runs):
            for name, code in sides if run % 2 == 0 else sides[::-1]:
                result = await run_side(server, f"{name}{run}", code, data, args.rate)
                result["by_statement"] = result["by_statement"][: args.top]
                print(json.dumps({"run": run, "side": name, **result}, indent=1), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.sql_time", description=__doc__)
    parser.add_argument("--rate", type=int, default=100, help="events/s (default 100)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--code", type=Path, help="a checkout of the code before")
    parser.add_argument("--top", type=int, default=15, help="statements listed (default 15)")
    bench_run(main(parser.parse_args()))
