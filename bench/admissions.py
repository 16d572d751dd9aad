"""Benchmark: how many admissions per second Postgres takes, without Slack or HTTP.

Going past one machine means N ingress and M worker processes on one Postgres; ingress
scales by adding processes until Postgres stops keeping up. This measures that ceiling on
this machine: `concurrency` connections each run the real admission statement
(`storage.admission.admit`: the seen event, the turn and its task, committed, with the
NOTIFY that wakes workers) back to back for `seconds`, each admission a new thread. The
figures are admissions per second, Postgres CPU per admission (from /proc, as in
bench/cpu.py), and the benchmark process's CPU (the asyncpg client side, which a real
deployment spreads over its ingress processes).

    .venv/bin/python -m bench.admissions
"""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import run as bench_run
from bench.cpu import postgres_cpu, process_cpu
from bench.stack import scratch_database
from storage.admission import Admission, admit
from storage.database import Database
from tests.pg import server_dsn

SECONDS = 10
CONCURRENCY = (4, 16, 32)


async def measure(server: str, concurrency: int, seconds: float = SECONDS) -> dict[str, Any]:
    counter = itertools.count()
    async with (
        scratch_database(server, f"bench_admissions_{concurrency}") as dsn,
        Database(dsn, min_size=concurrency, max_size=concurrency) as db,
    ):
        await db.migrate()

        async def one() -> None:
            n = next(counter)
            thread = f"{1_800_000_000 + n}.000100"
            address = {"team": "T1", "channel": "C1", "thread_ts": thread}
            admission = Admission(
                f"Ev{n}", f"T1:C1:{thread}", f"T1:C1:{thread}", address, f"<turn>{n}</turn>"
            )
            assert (await admit(db, admission)).admitted

        async def loop(until: float) -> int:
            done = 0
            while time.perf_counter() < until:
                await one()
                done += 1
            return done

        await asyncio.gather(*(loop(time.perf_counter() + 1) for _ in range(concurrency)))
        pg0, me0, t0 = postgres_cpu(server), process_cpu(os.getpid()), time.perf_counter()
        counts = await asyncio.gather(
            *(loop(time.perf_counter() + seconds) for _ in range(concurrency))
        )
        elapsed = time.perf_counter() - t0
        pg1, me1 = postgres_cpu(server), process_cpu(os.getpid())
    total = sum(counts)
    return {
        "concurrency": concurrency,
        "admissions": total,
        "per_second": total / elapsed,
        "postgres_ms": (pg1 - pg0) * 1000 / max(total, 1),
        "client_ms": (me1 - me0) * 1000 / max(total, 1),
        "postgres_cores": (pg1 - pg0) / elapsed,
    }


async def run_all(dsn: str, data: Path) -> dict[str, Any]:
    runs = []
    for concurrency in CONCURRENCY:
        runs.append(await measure(dsn, concurrency))
        print(f"  admissions: {runs[-1]}", flush=True)
    return {"seconds": SECONDS, "runs": runs}


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await run_all(await server_dsn(Path(tmp)), Path(tmp))


if __name__ == "__main__":
    bench_run(main())
