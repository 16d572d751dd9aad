"""Benchmark: one `serve` doing everything against 1 ingress + 2 workers, at one rate.

The profile (BENCHMARKS.md) found the ack tail is the event loop: acks queue behind the
workers' coroutines in the same process. Scaling apart (`serve --role`) moves the workers
to processes of their own; this measures whether the ingress's acks and the replies gain
from it, at the same open-loop rate, each shape on a fresh database with the default
settings (so the split has 2 × THREADGATE_WORKERS workers to `all`'s one ×; the figures
say so). Every event must be answered exactly once in both shapes.

    .venv/bin/python -m bench.roles [--rate 100] [--seconds 30] [--workers 1 2 4]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import asyncpg

from bench import loadgen
from bench import run as bench_run
from bench.ack_latency import figures
from bench.cpu import postgres_cpu, process_cpu
from bench.loadgen import TimedSlack
from bench.stack import NO_GUARD_RAILS, fakes, scratch_database, stop
from gateway.config.settings import Settings
from tests.fakes.openai_api import OpenAIServer
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import gateway_env
from tests.pg import server_dsn

RATE = 100
SECONDS = 30
DRAIN = 10
WORKERS = 2
# (name, the roles of its processes): the first process takes the events.
SHAPES = (("all", ("all",)), ("split", ("ingress", *("worker",) * WORKERS)))


def split(workers: int) -> tuple[str, tuple[str, ...]]:
    """One ingress and `workers` worker processes (`--workers`: how far that scales)."""
    return f"split{workers}", ("ingress", *("worker",) * workers)


@contextlib.asynccontextmanager
async def processes(
    dsn: str,
    roles: tuple[str, ...],
    slack: TimedSlack,
    model: OpenAIServer,
    data: Path,
    overrides: Mapping[str, str] | None = None,
) -> AsyncIterator[list[GatewayProcess]]:
    """`threadgate serve --role R` for each of `roles`, on one database; stopped on exit."""
    env = {**gateway_env(slack, model, dsn), **NO_GUARD_RAILS, **(overrides or {})}
    started: list[GatewayProcess] = []
    try:
        for role in roles:
            process = GatewayProcess(env, data, ["--role", role])
            await process.start()
            started.append(process)
        yield started
    finally:
        for process in started:
            await stop(process)


async def measure(
    server: str,
    data: Path,
    shape: str,
    rate: int,
    seconds: int,
    roles: tuple[str, ...] = (),
    overrides: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    roles = roles or dict(SHAPES)[shape]
    async with (
        scratch_database(server, f"bench_roles_{shape}_{rate}") as dsn,
        fakes() as (slack, model),
        processes(dsn, roles, slack, model, data, overrides) as running,
    ):
        url = running[0].events_url
        # Warm-up, answered before measuring, so that every process of either shape has
        # served and answered (imports, pools, first plans) before the clock starts.
        warm = await loadgen.open_loop(url, 20, 20)
        await loadgen.wait_answered(slack, warm, deadline=DRAIN)
        pids = [p.proc.pid for p in running if p.proc is not None]
        # Connected before the load: under it the gateways' pools may take every slot.
        probe = await asyncpg.connect(dsn)
        try:
            with loadgen.no_pauses():
                cpu0, began = _cpu(pids, server), time.perf_counter()
                samples = await loadgen.open_loop(url, rate, rate * seconds)
                connections = await _connections(probe)
                answered = await loadgen.wait_answered(slack, samples, deadline=DRAIN)
                cpu1, elapsed = _cpu(pids, server), time.perf_counter() - began
        finally:
            await probe.close()
        workers = Settings.field("THREADGATE_WORKERS").default
        result = {
            "cores": {k: round((cpu1[k] - cpu0[k]) / elapsed, 2) for k in cpu0},
            "connections": connections,
            "shape": shape,
            "roles": list(roles),
            "task_workers": workers * sum(role != "ingress" for role in roles),
            "rate": rate,
            **figures(samples, slack, answered),
            "unanswered": sum(s.thread_ts not in slack.first_post for s in samples),
            "answered_per_s": answered_rate(samples, slack),
        }
    print(f"  roles {shape} at {rate}/s: {result}", flush=True)
    return result


def _cpu(pids: list[int], server: str) -> dict[str, float]:
    """CPU seconds so far: the gateway processes, the Postgres server, this process."""
    return {
        "gateways": sum(process_cpu(pid) for pid in pids),
        "postgres": postgres_cpu(server),
        "bench": process_cpu(os.getpid()),
    }


async def _connections(probe: asyncpg.Connection) -> dict[str, int]:
    """The database's connections by state as the load ends (pg_stat_activity), the
    server's `max_connections`, and how many connection attempts the server refused."""
    rows = await probe.fetch(
        "SELECT coalesce(state, 'other') AS state, count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1"
    )
    found = {r["state"]: r["n"] for r in rows}
    found["max_connections"] = int(await probe.fetchval("SHOW max_connections"))
    return found


def answered_rate(samples: list[loadgen.Sample], slack: TimedSlack) -> float:
    """Events answered per second, from the first send to the last first reply."""
    replies = [slack.first_post[s.thread_ts] for s in samples if s.thread_ts in slack.first_post]
    if not replies:
        return 0.0
    return len(replies) / max(max(replies) - min(s.sent for s in samples), 1e-9)


async def run_all(dsn: str, data: Path, rate: int = RATE, seconds: int = SECONDS) -> dict[str, Any]:
    runs = [await measure(dsn, data, shape, rate, seconds) for shape, _ in SHAPES]
    return {"rate": rate, "seconds": seconds, "drain": DRAIN, "runs": runs}


# How far worker processes scale on one Postgres (`make bench`): a rate past what one
# worker process answers, one ingress, and 1, 2 and 4 worker processes, replies streamed
# (the default). With the default 20 connections a process, one ingress and four workers
# fill Postgres's default max_connections (100) and acks are refused (503): each process
# gets 16 here, so that all of them fit.
SCALING_RATE = 150
SCALING_SECONDS = 10
SCALING_WORKERS = (1, 2, 4)
SCALING_SETTINGS = {"THREADGATE_STREAMING": "true", "THREADGATE_DB_CONNECTIONS": "16"}


async def scaling(dsn: str, data: Path) -> dict[str, Any]:
    runs = []
    for n in SCALING_WORKERS:
        name, roles = split(n)
        runs.append(
            await measure(dsn, data, name, SCALING_RATE, SCALING_SECONDS, roles, SCALING_SETTINGS)
        )
    return {
        "rate": SCALING_RATE,
        "seconds": SCALING_SECONDS,
        "drain": DRAIN,
        "settings": SCALING_SETTINGS,
        "runs": runs,
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.roles", description=__doc__)
    p.add_argument("--rate", type=int, default=RATE, help=f"events/s (default {RATE})")
    p.add_argument("--seconds", type=int, default=SECONDS, help=f"default {SECONDS}")
    p.add_argument(
        "--workers", type=int, nargs="*", help="instead: 1 ingress and N worker processes, each N"
    )
    args = p.parse_args()

    async def run() -> Any:
        with tempfile.TemporaryDirectory() as tmp:
            server, data = await server_dsn(Path(tmp)), Path(tmp)
            if args.workers:
                shapes = [split(n) for n in args.workers]
                return [
                    await measure(server, data, name, args.rate, args.seconds, roles)
                    for name, roles in shapes
                ]
            return await run_all(server, data, args.rate, args.seconds)

    print(bench_run(run()))


if __name__ == "__main__":
    main()
