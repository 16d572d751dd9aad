"""Benchmark: ack latency and event → reply at 100 events/s, against bare bolt in the same run.

A real gateway process (`threadgate serve`, Slack and the model as loopback fakes in this
process, a real Postgres) receives signed `app_mention` events on an open-loop schedule,
each in its own thread; each ack comes only after the turn and its task are committed.
In the same run, a bare slack-bolt app on the same fakes — ack first, no persistence,
the same reply — gives the baseline. Runs alternate which side goes first, and the figure
reported is the median over runs. A last, unreported gateway run is profiled with py-spy.

    .venv/bin/python -m bench.ack_latency
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import web

from bench import loadgen, profile
from bench import run as bench_run
from bench.bare_bolt import app as bare_bolt_app
from bench.loadgen import Sample, TimedSlack
from bench.stack import fakes, gateway
from tests.pg import server_dsn

RATE = 100
SECONDS = 10
RUNS = 3
WARMUP = 20
RESULTS = Path(__file__).parent / "results"


async def bare_bolt(slack_url: str) -> tuple[web.AppRunner, str]:
    """The baseline: bolt's own defaults (ack first, then work), no storage, same reply."""
    web_app = bare_bolt_app(slack_url)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"


async def load(url: str, slack: TimedSlack, rate: float, seconds: float) -> dict[str, Any]:
    """Warm up, then send `rate`/s for `seconds`; the figures of that one load."""
    await loadgen.open_loop(url, WARMUP, WARMUP)
    with loadgen.no_pauses():
        samples = await loadgen.open_loop(url, rate, int(rate * seconds))
        answered = await loadgen.wait_answered(slack, samples, deadline=60)
    await asyncio.sleep(0.5)  # a duplicate post would land now
    return figures(samples, slack, answered)


def figures(samples: list[Sample], slack: TimedSlack, answered: bool) -> dict[str, Any]:
    acks = [s.ack_ms for s in samples]
    replies = loadgen.reply_ms(samples, slack)
    return {
        "events": len(samples),
        "non_200": sum(s.status != 200 for s in samples),
        "ack_p50": loadgen.median(acks),
        "ack_p99": loadgen.percentile(acks, 0.99),
        "reply_p50": loadgen.median(replies) if replies else float("nan"),
        "reply_p99": loadgen.percentile(replies, 0.99) if replies else float("nan"),
        "answered": answered,
        "exactly_once": loadgen.exactly_once(slack, samples),
        "sender_lag_ms": loadgen.sender_lag_ms(samples),
    }


async def ours(dsn: str, data: Path, run: int) -> dict[str, Any]:
    async with fakes() as (slack, model), gateway(dsn, f"ack{run}", slack, model, data) as gw:
        return await load(gw.events_url, slack, RATE, SECONDS)


async def baseline() -> dict[str, Any]:
    async with fakes() as (slack, _):
        runner, url = await bare_bolt(slack.url)
        try:
            return await load(url, slack, RATE, SECONDS)
        finally:
            await runner.cleanup()


async def profiled(dsn: str, data: Path) -> dict[str, Any]:
    """One more gateway run at the same rate under `py-spy record`; returns the summary."""
    out = RESULTS / "ack_profile.raw"
    RESULTS.mkdir(exist_ok=True)
    async with fakes() as (slack, model), gateway(dsn, "ackprof", slack, model, data) as gw:
        assert gw.proc is not None
        await loadgen.open_loop(gw.events_url, WARMUP, WARMUP)
        spy = await profile.start(gw.proc.pid, out, SECONDS + 2)
        samples = await loadgen.open_loop(gw.events_url, RATE, RATE * SECONDS)
        await loadgen.wait_answered(slack, samples, deadline=60)
        await spy.wait()
    return profile.summarize(out)


async def run_all(dsn: str, data: Path) -> dict[str, Any]:
    runs = []
    for run in range(RUNS):
        if run % 2 == 0:
            pair = {"ours": await ours(dsn, data, run), "base": await baseline()}
        else:
            pair = {"base": await baseline(), "ours": await ours(dsn, data, run)}
        print(f"  ack run {run}: {pair}", flush=True)
        runs.append(pair)
    return {"rate": RATE, "seconds": SECONDS, "runs": runs, "profile": await profiled(dsn, data)}


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        result = await run_all(await server_dsn(Path(tmp)), Path(tmp))
    for run in result["runs"]:
        print(run)
    print(result["profile"])


if __name__ == "__main__":
    bench_run(main())
