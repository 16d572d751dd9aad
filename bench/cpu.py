"""Benchmark: CPU per answered event, the gateway process plus Postgres, against bare bolt.

Target (issue: efficiency): the gateway process and the Postgres server together spend at
most 1.5× the process CPU a bare slack-bolt app spends per answered event. Load: 100
threads × 4 mentions at 50 events/s (each thread's first event opens it, the next three
reply in it), a zero-latency echo model. CPU is read from /proc: utime + stime of the
process, and for Postgres the postmaster's own and reaped children's time plus every live
backend's, so backends that exit during the run still count. The benchmark process (the
fakes and the load generator) is measured too, to show it is not what limits the run.

    .venv/bin/python -m bench.cpu
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import loadgen, profile
from bench import run as bench_run
from bench.bare_bolt import bare_bolt
from bench.loadgen import TimedSlack
from bench.stack import fakes, gateway
from tests.fakes.slack_events import app_mention_event
from tests.pg import server_dsn

THREADS = 100
PER_THREAD = 4
RATE = 50
RUNS = 3
RESULTS = Path(__file__).parent / "results"
_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # fields from 3 (state) on


def process_cpu(pid: int, *, children: bool = False) -> float:
    """utime + stime of `pid` in seconds (plus its reaped children's, if asked)."""
    fields = _stat(pid)
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICK


def postmaster(dsn: str) -> int | None:
    """The pid of the server at `dsn` when it is the embedded one on this machine: its
    socket directory is its data directory, which holds `postmaster.pid`."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(dsn).query)
    for host in query.get("host", []):
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((Path(host) / "postmaster.pid").read_text().split()[0])
    return None


def postgres_cpu(dsn: str) -> float:
    """The Postgres server at `dsn`: its postmaster with its reaped backends, and its live
    backends. Only that server: an earlier run's server can still be running here (it
    stops itself up to a minute after its data directory is deleted), and its time
    vanishing mid-run would read as negative CPU. For a server this machine cannot tell
    (DATABASE_URL), every postgres process on it."""
    root = postmaster(dsn)
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            parent = int(_stat(pid)[1])
            if root is not None:
                if pid == root or parent == root:
                    total += process_cpu(pid, children=pid == root)
                continue
            is_postmaster = Path(f"/proc/{parent}/comm").read_text().strip() != "postgres"
            total += process_cpu(pid, children=is_postmaster)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue  # exited while we looked: its time is in its postmaster's children
    return total


def events(count: int = THREADS * PER_THREAD) -> Callable[[int], dict[str, Any]]:
    """Event n goes to thread n % THREADS; the first round of events opens the threads."""
    base = 1_800_000_000 + os.getpid() % 1000 * 1000

    def factory(n: int) -> dict[str, Any]:
        thread = f"{base + n % THREADS}.000100"
        ts = f"{base + n % THREADS}.{100 + n // THREADS:06d}"
        return app_mention_event(
            text=f"<@UBOT> load event {n}", ts=ts, thread_ts=None if ts == thread else thread
        )

    return factory


async def measure(
    url: str, pid: int, slack: TimedSlack, pg: str | None, spy: Path | None = None
) -> dict[str, Any]:
    """CPU per answered event of `pid`, and of the Postgres server at `pg` if given."""
    await loadgen.open_loop(url, 20, 20, loadgen.mention)  # warm-up, own threads
    await loadgen.wait_answered_count(slack, 20, deadline=60)
    answered_before = sum(slack.post_count.values())
    cpu0, pg0, me0 = process_cpu(pid), postgres_cpu(pg) if pg else 0.0, process_cpu(os.getpid())
    recorder = None
    if spy is not None:
        kind = "flamegraph" if spy.suffix == ".svg" else "raw"
        recorder = await profile.start(pid, spy, THREADS * PER_THREAD / RATE + 1, kind)
    samples = await loadgen.open_loop(url, RATE, THREADS * PER_THREAD, events())
    ok = await loadgen.wait_answered_count(slack, answered_before + len(samples), deadline=120)
    if recorder is not None:
        await recorder.wait()
    cpu1, pg1, me1 = process_cpu(pid), postgres_cpu(pg) if pg else 0.0, process_cpu(os.getpid())
    answered = sum(slack.post_count.values()) - answered_before
    per = 1000 / max(answered, 1)
    return {
        "events": len(samples),
        "answered": answered,
        "all_answered": ok,
        "process_ms": (cpu1 - cpu0) * per,
        "postgres_ms": (pg1 - pg0) * per,
        "bench_ms": (me1 - me0) * per,
        "ack_p50": loadgen.median([s.ack_ms for s in samples]),
    }


async def ours(dsn: str, data: Path, run: int, spy: Path | None = None) -> dict[str, Any]:
    async with fakes() as (slack, model), gateway(dsn, f"cpu{run}", slack, model, data) as gw:
        assert gw.proc is not None
        return await measure(gw.events_url, gw.proc.pid, slack, pg=dsn, spy=spy)


async def baseline() -> dict[str, Any]:
    async with fakes() as (slack, _), bare_bolt(slack.url) as bolt:
        return await measure(bolt.events_url, bolt.pid, slack, pg=None)


async def run_all(dsn: str, data: Path, count: int = RUNS, *, spy: bool = True) -> dict[str, Any]:
    runs = []
    for run in range(count):
        # Alternating which side goes first, as bench/ack_latency.py does.
        if run % 2 == 0:
            pair = {"ours": await ours(dsn, data, run), "base": await baseline()}
        else:
            pair = {"base": await baseline(), "ours": await ours(dsn, data, run)}
        print(f"  cpu run {run}: {pair}", flush=True)
        runs.append(pair)
    result = {"rate": RATE, "threads": THREADS, "per_thread": PER_THREAD, "runs": runs}
    if spy:
        result["profile"] = await profiled(dsn, data)
    return result


async def profiled(dsn: str, data: Path) -> dict[str, Any]:
    """One more gateway run under py-spy: a flame graph (SVG), then raw stacks summarized."""
    RESULTS.mkdir(exist_ok=True)
    await ours(dsn, data, 90, spy=RESULTS / "cpu_flame.svg")
    await ours(dsn, data, 91, spy=RESULTS / "cpu_profile.raw")
    summary = profile.summarize(RESULTS / "cpu_profile.raw", top=15)
    summary["by_caller"] = profile.by_caller(RESULTS / "cpu_profile.raw", top=25)
    return summary


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dsn, data = await server_dsn(Path(tmp)), Path(tmp)
        if "--profile" in sys.argv:
            summary = await profiled(dsn, data)
            for key in ("by_caller", "inclusive", "self", "areas"):
                print(key)
                for name, share in summary[key].items():
                    print(f"  {share * 100:5.1f}%  {name}")
        else:
            await run_all(dsn, data, int(sys.argv[1]) if len(sys.argv) > 1 else RUNS, spy=False)


if __name__ == "__main__":
    bench_run(main())
