"""Benchmark: the ack against bare bolt, and against the code before a change, in one run.

bench/cpu.py's load (100 threads × 4 mentions: each thread's first event opens it, the next
three reply in it, so most admissions are in a thread we know), at a rate of choice.
Each run measures bare bolt (bench/bare_bolt.py: ack first, no storage), this code, and,
with `--code DIR` (a checkout of the code before), that code too, in alternating order,
each gateway on a fresh database: the ack's p50 and p99, CPU per answered event (the
process; Postgres), the load generator's lag, and how late this process's own event loop
ran (the fakes share it, so a busy fake shows as ack latency of whoever it serves).

    .venv/bin/python -m bench.ack_pairs [--rate 100] [--runs 3] [--code DIR] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench import cpu, loadgen, profile
from bench import run as bench_run
from bench.bare_bolt import bare_bolt
from bench.loadgen import TimedSlack
from bench.stack import NO_GUARD_RAILS, fakes, scratch_database, stop
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import gateway_env
from tests.pg import server_dsn

EVENTS = 400


async def gateway(
    dsn: str,
    data: Path,
    label: str,
    code: Path | None,
    rate: int,
    spy: Path | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`threadgate serve` from `code` (None: this checkout) on a fresh database, measured
    (and recorded by py-spy into `spy`, if given)."""
    async with fakes() as (slack, model), scratch_database(dsn, f"pairs_{label}") as db:
        process = GatewayProcess(
            {**gateway_env(slack, model, db), **NO_GUARD_RAILS, **(extra or {})}, code or data
        )
        await process.start()
        try:
            assert process.proc is not None
            return await measure(process.events_url, process.proc.pid, slack, dsn, rate, spy)
        finally:
            await stop(process)


async def baseline(rate: int) -> dict[str, Any]:
    async with fakes() as (slack, _), bare_bolt(slack.url) as bolt:
        return await measure(bolt.events_url, bolt.pid, slack, None, rate)


async def lateness(out: list[float]) -> None:
    """How late each 5 ms sleep of this process's loop woke, in ms, until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        began = loop.time()
        await asyncio.sleep(0.005)
        out.append((loop.time() - began - 0.005) * 1000)


async def measure(
    url: str, pid: int, slack: TimedSlack, pg: str | None, rate: int, spy: Path | None = None
) -> dict[str, Any]:
    await loadgen.open_loop(url, 20, 20, loadgen.mention)  # warm-up, own threads
    await loadgen.wait_answered_count(slack, 20, deadline=60)
    before, calls = sum(slack.post_count.values()), len(slack.calls)
    late: list[float] = []
    watch = asyncio.ensure_future(lateness(late))
    cpu0, pg0 = cpu.process_cpu(pid), cpu.postgres_cpu(pg) if pg else 0.0
    recorder = None if spy is None else await profile.start(pid, spy, EVENTS / rate + 1)
    with loadgen.no_pauses():
        samples = await loadgen.open_loop(url, rate, EVENTS, cpu.events(EVENTS))
        ok = await loadgen.wait_answered_count(slack, before + len(samples), deadline=120)
    cpu1, pg1 = cpu.process_cpu(pid), cpu.postgres_cpu(pg) if pg else 0.0
    watch.cancel()
    if recorder is not None:
        await recorder.wait()
    answered = sum(slack.post_count.values()) - before
    per = 1000 / max(answered, 1)
    acks = [s.ack_ms for s in samples]
    methods = Counter(call.method for call in slack.calls[calls:])
    return {
        "ack_p50": round(loadgen.median(acks), 1),
        "ack_p99": round(loadgen.percentile(acks, 0.99), 1),
        "process_ms": round((cpu1 - cpu0) * per, 2),
        "postgres_ms": round((pg1 - pg0) * per, 2),
        "answered": answered,
        "all_answered": ok,
        "sender_lag_ms": round(loadgen.sender_lag_ms(samples), 1),
        "bench_loop_late_p99": round(loadgen.percentile(late, 0.99), 1),
        "slack_calls_per_event": {m: round(n / max(answered, 1), 2) for m, n in methods.items()},
    }


async def main(args: argparse.Namespace) -> None:
    extra = {"THREADGATE_STREAMING": "true" if args.streaming == "on" else "false"}
    with tempfile.TemporaryDirectory() as tmp:
        dsn, data = await server_dsn(Path(tmp)), Path(tmp)
        sides: list[tuple[str, Path | None]] = [("after", None)]
        if args.code:
            sides.insert(0, ("before", args.code))
        for run in range(args.runs):
            row: dict[str, Any] = {"run": run, "bolt": await baseline(args.rate)}
            for name, code in sides if run % 2 == 0 else sides[::-1]:
                row[name] = await gateway(dsn, data, f"{name}{run}", code, args.rate, extra=extra)
            print(json.dumps(row), flush=True)
        if args.profile:  # one more run of this code, under py-spy
            cpu.RESULTS.mkdir(exist_ok=True)
            raw = cpu.RESULTS / "ack_pairs.raw"
            print(json.dumps(await gateway(dsn, data, "spy", None, args.rate, raw, extra)))
            summary = profile.summarize(raw)
            summary["by_caller"] = profile.by_caller(raw, top=25)
            print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.ack_pairs", description=__doc__)
    parser.add_argument("--rate", type=int, default=100, help="events/s (default 100)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--code", type=Path, help="a checkout of the code before")
    parser.add_argument("--profile", action="store_true", help="then py-spy one run of this")
    parser.add_argument(
        "--streaming", choices=("on", "off"), default="on", help="replies streamed (default on)"
    )
    bench_run(main(parser.parse_args()))
