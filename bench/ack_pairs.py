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
from bench.sender import send_apart
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
            {**gateway_env(slack, model, db), **NO_GUARD_RAILS, **(extra or {})},
            code or data,
            forked=False,  # both sides started alike, the code before from its checkout
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
    events = cpu.events(EVENTS)
    with loadgen.no_pauses():
        samples = await send_apart(url, rate, [events(n) for n in range(EVENTS)])
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


Side = tuple[str, Path | None, dict[str, str]]
"""A gateway measured: its name, the checkout it runs from (None: this one), its settings."""

RATES = (100, 50)
RUNS = 3
STREAMING = {"THREADGATE_STREAMING": "true"}  # the default, which gateway_env turns off


async def pairs(
    dsn: str, data: Path, rate: int, runs: int, sides: list[Side]
) -> list[dict[str, Any]]:
    """`runs` runs at `rate`, each of bare bolt and every side, the sides' order alternated."""
    rows = []
    for run in range(runs):
        row: dict[str, Any] = {"run": run, "bolt": await baseline(rate)}
        for name, code, env in sides if run % 2 == 0 else sides[::-1]:
            label = f"{name}{rate}_{run}"
            row[name] = await gateway(dsn, data, label, code, rate, extra={**STREAMING, **env})
        print(f"  ack pairs at {rate}/s: {json.dumps(row)}", flush=True)
        rows.append(row)
    return rows


async def run_all(dsn: str, data: Path) -> dict[str, Any]:
    """`make bench`: this code against bare bolt at each of `RATES`, streaming on, and the
    same code with the ingress on the workers' loop (THREADGATE_INGRESS_THREAD=false)."""
    sides: list[Side] = [("ours", None, {}), ("one_loop", None, ONE_LOOP)]
    return {
        "events": EVENTS,
        "rates": {str(rate): await pairs(dsn, data, rate, RUNS, sides) for rate in RATES},
    }


ONE_LOOP = {"THREADGATE_INGRESS_THREAD": "false"}


async def main(args: argparse.Namespace) -> None:
    streaming = {"THREADGATE_STREAMING": "true" if args.streaming == "on" else "false"}
    before_env = dict(pair.split("=", 1) for pair in args.before_env)
    with tempfile.TemporaryDirectory() as tmp:
        dsn, data = await server_dsn(Path(tmp)), Path(tmp)
        sides: list[Side] = [("after", None, streaming)]
        if args.code or before_env:
            sides.insert(0, ("before", args.code, {**streaming, **before_env}))
        await pairs(dsn, data, args.rate, args.runs, sides)
        if args.profile:  # one more run of this code, under py-spy
            cpu.RESULTS.mkdir(exist_ok=True)
            raw = cpu.RESULTS / "ack_pairs.raw"
            print(json.dumps(await gateway(dsn, data, "spy", None, args.rate, raw, streaming)))
            summary = profile.summarize(raw)
            summary["by_caller"] = profile.by_caller(raw, top=25)
            print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.ack_pairs", description=__doc__)
    parser.add_argument("--rate", type=int, default=100, help="events/s (default 100)")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--code", type=Path, help="a checkout of the code before")
    parser.add_argument(
        "--before-env",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="settings of the side before (with or without --code)",
    )
    parser.add_argument("--profile", action="store_true", help="then py-spy one run of this")
    parser.add_argument(
        "--streaming", choices=("on", "off"), default="on", help="replies streamed (default on)"
    )
    bench_run(main(parser.parse_args()))
