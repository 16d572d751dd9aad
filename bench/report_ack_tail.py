"""BENCHMARKS.md's section on issue 36, the ack behind reply work: rendered from
`make bench`'s figures (bench/ack_pairs.py, the slower-host runs of bench/first_text.py,
bench/roles.py's scaling), with what was removed and what stands in the way written by
hand below them (`REMOVED`, `IN_THE_WAY`: re-read them against the tables after a run)."""

from __future__ import annotations

import statistics
from typing import Any

median = statistics.median

SIDES = (("bolt", "bare bolt"), ("ours", "threadgate"), ("one_loop", "threadgate, one loop"))


def render(r: dict[str, Any]) -> str:
    a = r.get("ack_pairs")
    if not a:
        return "## The ack behind reply work\n\n(not measured in this run)"
    lines = [
        "## The ack behind reply work (issue 36, bench/ack_pairs.py)",
        "",
        f"bench/cpu.py's load ({a['events']} events: 100 threads × 4 mentions, so three of every",
        "four admissions are in a thread we know), streaming on (the default: `chat.startStream`",
        "and `chat.stopStream` per reply), a zero-latency model. Each run measures bare bolt",
        "(bench/bare_bolt.py: ack first, no storage, one post), threadgate as deployed (its",
        "ingress on a thread and loop of its own) and threadgate with",
        "`THREADGATE_INGRESS_THREAD=false` (ingress and workers on one loop), each gateway on a",
        "fresh database, the order alternated. The events are sent by a process that does",
        "nothing else (bench/sender.py), so an ack is timed by an idle loop. Medians of the",
        "runs; each ratio is the median of the runs' ratios to the bolt of the same run.",
        "",
        "| rate | side | ack p50 | ack p99 (runs) | ack p99 | × bolt | CPU ms / answered event: gateway + Postgres | × bolt | Slack calls / event |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rate, runs in a["rates"].items():
        for side, name in SIDES:
            lines.append(f"| {rate}/s | {name} | " + _row(runs, side))
    lines += ["", "All times in ms.", "", _targets(a), _slow(r), _scaling(r), REMOVED, IN_THE_WAY]
    return "\n".join(lines)


Row = tuple[str, str, str, str, str, bool]


def summary_rows(r: dict[str, Any]) -> list[Row]:
    """The Summary's rows for the issue's two ratios at 100 events/s, streaming on."""
    a = r.get("ack_pairs")
    runs = (a or {}).get("rates", {}).get("100")
    if not runs:
        return []
    ack = median(run["ours"]["ack_p99"] for run in runs)
    bolt = median(run["bolt"]["ack_p99"] for run in runs)
    ack_ratio, cpu_ratio = _ratios(runs, "ours")
    cpu, bolt_cpu = (median(_cpu(run[k]) for run in runs) for k in ("ours", "bolt"))
    return [
        ("ack p99 @100/s, streamed (ack pairs)", f"{ack:.1f} ms", f"{bolt:.1f} ms",
         f"{ack_ratio:.1f}×", "≤ 2× baseline", ack_ratio <= 2),
        ("CPU per answered event, streamed, gateway + Postgres", f"{cpu:.1f} ms",
         f"{bolt_cpu:.1f} ms", f"{cpu_ratio:.1f}×", "≤ 2× baseline", cpu_ratio <= 2),
    ]  # fmt: skip


def _ratios(runs: list[dict[str, Any]], side: str) -> tuple[float, float]:
    """`side` against bolt: the medians of the runs' ratios of ack p99 and of CPU per event."""
    ack = median(run[side]["ack_p99"] / run["bolt"]["ack_p99"] for run in runs)
    return ack, median(_cpu(run[side]) / _cpu(run["bolt"]) for run in runs)


def _cpu(run: dict[str, Any]) -> float:
    return float(run["process_ms"] + run["postgres_ms"])


def _row(runs: list[dict[str, Any]], side: str) -> str:
    p99s = [run[side]["ack_p99"] for run in runs]
    ack_ratio, cpu_ratio = _ratios(runs, side)
    gw, pg = (median(run[side][k] for run in runs) for k in ("process_ms", "postgres_ms"))
    calls = runs[-1][side].get("slack_calls_per_event", {})
    shown = ", ".join(f"{m} {n:g}" for m, n in sorted(calls.items()))
    return (
        f"{median(run[side]['ack_p50'] for run in runs):.1f} |"
        f" {', '.join(f'{p:.1f}' for p in p99s)} | {median(p99s):.1f} | {ack_ratio:.1f}× |"
        f" {gw:.1f} + {pg:.1f} ({gw + pg:.1f}) | {cpu_ratio:.1f}× | {shown} |"
    )


def _targets(a: dict[str, Any]) -> str:
    runs = a["rates"].get("100") or next(iter(a["rates"].values()))
    ack, cpu = _ratios(runs, "ours")
    one = median(run["one_loop"]["ack_p99"] for run in runs)
    ours = median(run["ours"]["ack_p99"] for run in runs)
    return (
        f"**Targets at 100 events/s, streaming on.** Ack p99 ≤ 2× bolt: {ack:.1f}×,"
        f" {'met' if ack <= 2 else '**missed**'}; the ingress's own loop took the p99 from"
        f" {one:.1f} ms (one loop) to {ours:.1f} ms. CPU per answered event, gateway +"
        f" Postgres, ≤ 2× bolt: {cpu:.1f}×, {'met' if cpu <= 2 else '**missed**'}."
    )


def _slow(r: dict[str, Any]) -> str:
    f = r.get("first_text") or {}
    runs = [run for run in f.get("runs", []) if run.get("slow")]
    if not runs:
        why = f.get("slow_skipped") or "not run"
        return f"\n**First visible text on a host a third slower**: not measured ({why})."
    p50, p95, p99 = (median(run[f"overhead_{q}"] for run in runs) for q in ("p50", "p95", "p99"))
    per = {k: median(run["cpu_ms_per_event"][k] for run in runs) for k in ("gateway", "postgres")}
    cores = median(run["cores"]["gateway"] for run in runs)
    return (
        f"\n**First visible text on a host a third slower** (bench/first_text.py, shape `all`,"
        f" {runs[0]['rate']} events/s, the gateway and Postgres held to 2/3 of the CPU they"
        f" could use by cgroup quotas, bench/slow_host.py; median of {len(runs)} runs):"
        f" overhead past the model's first token p50 {p50:,.0f} ms, p95 {p95:,.0f} ms,"
        f" p99 {p99:,.0f} ms against ≤ 300 ms, {'met' if p99 <= 300 else '**missed**'}. The"
        f" gateway used {cores:.2f} of its 0.67 core at {per['gateway']:.1f} ms of CPU per"
        f" event (Postgres {per['postgres']:.1f} ms)."
    )


def _scaling(r: dict[str, Any]) -> str:
    s = r.get("scaling")
    if not s:
        return "\n**Worker processes on one Postgres**: not measured in this run."
    settings = ", ".join(f"`{k}={v}`" for k, v in s.get("settings", {}).items())
    lines = [
        "",
        f"**Worker processes on one Postgres** (bench/roles.py `scaling`: {s['rate']} events/s for",
        f"{s['seconds']} s into one `--role ingress`, answered by N `--role worker` processes of",
        f"16 task workers each, {s['drain']} s to drain, {settings or 'default settings'};",
        "cores are CPU seconds per second of the run, connections the database's as the load",
        "ended; Postgres ms is its CPU per answered event):",
        "",
        "| worker processes | answered/s | unanswered | non-200 acks | ack p99 | reply p50 | cores: gateways, Postgres, bench | Postgres ms / event | connections (active, idle, of max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in s["runs"]:
        c, conns = run["cores"], run["connections"]
        per_event = 1000 * c["postgres"] / max(run["answered_per_s"], 1e-9)
        lines.append(
            f"| {sum(role == 'worker' for role in run['roles'])} | {run['answered_per_s']:.1f} |"
            f" {run['unanswered']} of {run['events']} | {run['non_200']} |"
            f" {run['ack_p99']:.0f} ms | {run['reply_p50']:.0f} ms | {c['gateways']:.2f},"
            f" {c['postgres']:.2f}, {c['bench']:.2f} | {per_event:.1f} |"
            f" {conns.get('active', 0)}, {conns.get('idle', 0)} of"
            f" {conns.get('max_connections', '?')} |"
        )
    best = max(s["runs"], key=lambda run: run["answered_per_s"])
    pg_ms = 1000 * best["cores"]["postgres"] / max(best["answered_per_s"], 1e-9)
    lines += [
        "",
        f"At {pg_ms:.1f} ms of Postgres CPU per answered event, one Postgres core carries about"
        f" {1000 / pg_ms:,.0f} answered events/s, a 4-core server (leaving a core for its own"
        f" upkeep) about {3000 / pg_ms:,.0f}/s, before connections or the claim statement's"
        " locks are what limit it.",
    ]
    return "\n".join(lines)


# Written by hand (2026-12-03 and 2026-12-04): what was taken off the ack's path, in order.
REMOVED = """
**What was removed from the ack's path**, in order (the ack timeline, p50 at 100/s inside
the handler: 179 → 38 → 23 ms on 2026-12-03):

- **Gathers with nothing to wait for**: the names (cached), the turn and an empty back-fill
  ran as tasks in three nested `asyncio.gather`s, six turns of a busy loop.
- **The second round trip** in a known thread: the admission statement asks it itself.
- **The scheduler's hot loop** (16.7% of the gateway's samples at 50/s).
- **Three of four Slack calls** per quick reply: the status and agent session only after
  `THREADGATE_STATUS_DELAY_SECONDS` (1 s).
- **Connections kept for admissions** when reply work holds every work connection
  (`THREADGATE_ADMISSION_CONNECTIONS`).
- **The workers' loop itself** (2026-12-04): in one `serve` the ingress is an ingress
  gateway on a thread with its own event loop, pool and Slack session
  (gateway/process/ingress_thread.py, `THREADGATE_INGRESS_THREAD`); an ack waits for the
  GIL (at most `sys.setswitchinterval`, 1 ms while the ingress runs, per wake-up), not for
  the workers' ready callbacks. Its profile (py-spy, 100/s): of the ingress thread's
  samples, three quarters are its loop waiting (the GIL or a core), the rest the events
  route, bolt's dispatch and the admission; its NOTIFY wake-ups are gone (an ingress opens
  no LISTEN connection).
- **A new thread's prompt pin** (2026-12-04): a session's first task read its pin, then
  ran a transaction of four more round trips (lock, read, store and begin, commit) with
  the prompt's and offer's text as parameters; now one statement (`pin_epoch`, migration
  023) sending the text once per process. Not on the ack's path, but on every new
  thread's way to its first words."""

IN_THE_WAY = """
**The price of the ingress's own loop** (bench/first_text.py at 100 events/s, shape `all`,
200 task workers, 5 pairs of runs with and without the thread, 2026-12-04 18:00-18:04, on
a host that slowed during them): the ack's p99 26-57 ms with the thread against 347-822 ms
without, and the gateway's CPU per event, divided by the benchmark process's own (its code
unchanged, so it follows the host's speed), 1.86-2.00 with the thread against 1.74-1.90
without: about 4% more CPU, the GIL handed back and forth. First text was a queue either
way (overhead p99 4.5-11.3 s with, 3.5-7.7 s without; the host's speed moved more than
that). At 50 events/s, where the workers' loop is not full, one loop acks sooner (p99 7.8
against 12.2 ms above): each of the ingress's wake-ups may wait up to the 1 ms switch
interval for the GIL. The default keeps the thread: it bounds the ack under load, the one
deadline Slack enforces, and `THREADGATE_INGRESS_THREAD=false` is there for a deployment
that never saturates.

**What stands in the way.** The ack's tail and first text are both CPU now, and this run's
host was slow: `bench/host.py` read 113-165 ms (medians up to 255) against 78-96 ms in the
run of 2026-12-02 that met the first-text target, so every part needed 1.5-2× the CPU per
event it needed then. At 100 streamed events/s the gateway spends 11-12 ms of CPU per
answered event (bare bolt 3.1), so its one process would need 1.1-1.2 cores where it has
one GIL: its replies queue (first text p99 2.6-3.6 s in shape `all`, 485 ms with two
worker processes in shape `split`). The ack no longer queues with them (its own loop: p99
62.8 → 20.5 ms at 100/s) but shares the GIL and the machine's two cores with everything.

Scaling on this machine stops at one worker process: the gateways take 1.0-1.1 cores,
Postgres 0.4-0.5 and the fakes with the sender 0.3-0.4 of the 2, so 2 and 4 worker
processes answered fewer events per second than one (85 and 89 against 114), and
Postgres's CPU per answered event rose with the number of claimers (3.8 → 5.6 ms). With
the default 20 connections a process, one ingress and four workers filled Postgres's
default 100 connections under load and 69 of 1,500 acks were refused (503, so Slack
delivers again; 2026-12-04 17:45, replies posted whole): here each process gets 16
(`THREADGATE_DB_CONNECTIONS`, which `doctor` now checks against `max_connections`).

What would take it further, in order of what it saves: a cheaper model request than httpx
over aiohttp (a quarter of the workers' CPU per event in the profile: building the
request, the transport, httpx's log line), fewer statements per streamed reply (12.3: the
outbox's two claims, open and sent are four of them), and worker processes on a host with
cores to spare for them."""
