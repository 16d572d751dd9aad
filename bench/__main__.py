"""`make bench`: every benchmark, one after another, then BENCHMARKS.md.

Figures go to bench/results/results.json (gitignored) first, so a report can be
re-rendered (`python -m bench.report`) without measuring again.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import (
    ack_latency,
    ack_pairs,
    admissions,
    costs,
    cpu,
    first_text,
    flat_cost,
    host,
    report,
    roles,
    rss,
    slack_reads,
    sql_count,
    stream_parse,
    throughput,
)
from bench import run as bench_run
from tests.pg import server_dsn


async def measure() -> dict[str, Any]:
    results: dict[str, Any] = {"machine": report.machine(), "started": time.time()}
    results["host_start"] = host.measure()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        dsn = await server_dsn(data)
        results["postgres"] = await report.postgres_version(dsn)
        for name, step in (
            ("ack", ack_latency.run_all),
            ("ack_pairs", ack_pairs.run_all),
            ("cpu", cpu.run_all),
            ("flat", flat_cost.run_all),
            ("rss", rss.run_all),
            ("throughput", throughput.run_all),
            ("first_text", first_text.run_all),
            ("roles", roles.run_all),
            ("scaling", roles.scaling),
            ("admissions", admissions.run_all),
            ("costs", costs.run_all),
            ("slack_reads", slack_reads.run_all),
        ):
            print(f"bench: {name}", flush=True)
            results[name] = await step(dsn, data)
        print("bench: sql", flush=True)
        results["sql"] = await sql_count.run_all(data)
    results["host_end"] = host.measure()
    results["finished"] = time.time()
    results["loadavg_end"] = report.loadavg()
    return results


if __name__ == "__main__":
    stream_parse.main()
    figures = bench_run(measure())
    report.RESULTS.mkdir(exist_ok=True)
    report.RESULTS_JSON.write_text(json.dumps(figures, indent=2))
    report.write(json.loads(report.RESULTS_JSON.read_text()))
