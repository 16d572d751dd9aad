"""Benchmark: resident memory of the gateway process with 1,000 open threads.

The model holds every request open (it never answers), and 1,000 mentions — each its own
thread — are sent at 200/s; once all are acked, every one is a task waiting in the
gateway (`THREADGATE_WORKERS` of them in flight at the model, the rest queued in
Postgres). The figure is the gateway's VmRSS then, against its own VmRSS after warm-up
with nothing open (the baseline: the same process idle).

    .venv/bin/python -m bench.rss
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from bench import loadgen
from bench import run as bench_run
from bench.stack import fakes, gateway, rss_kib
from tests.fakes.openai_api import Hang, RecordedRequest, Reply
from tests.gateway.rig import echo
from tests.pg import server_dsn

THREADS = 1000


def held(seen: RecordedRequest) -> Reply:
    return Hang()


async def run_all(dsn: str, data: Path) -> dict[str, Any]:
    async with fakes() as (slack, model), gateway(dsn, "rss", slack, model, data) as gw:
        assert gw.proc is not None
        warm = await loadgen.open_loop(gw.events_url, 10, 10)
        await loadgen.wait_answered(slack, warm, deadline=30)
        await asyncio.sleep(1)
        idle, _ = rss_kib(gw.proc.pid)
        model.default = held
        samples = await loadgen.open_loop(gw.events_url, 200, THREADS)
        await asyncio.sleep(3)
        loaded, peak = rss_kib(gw.proc.pid)
        model.default = echo
    return {
        "threads": THREADS,
        "acked": sum(s.status == 200 for s in samples),
        "idle_kib": idle,
        "loaded_kib": loaded,
        "peak_kib": peak,
        "per_thread_kib": (loaded - idle) / THREADS,
    }


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print(await run_all(await server_dsn(Path(tmp)), Path(tmp)))


if __name__ == "__main__":
    bench_run(main())
