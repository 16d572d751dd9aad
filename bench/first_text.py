"""Benchmark: how soon a streamed reply shows its first words, at 100 events/s.

Target (issue: native streaming): the first visible text of a reply reaches Slack within
the model's time to first token plus 300 ms. A real gateway process (streaming on) gets
signed `app_mention` events on an open-loop schedule, each opening its own thread. The
fake model streams every answer at a set pace: nothing for `TTFT` seconds, then one SSE
event (four characters of the `final_reply` arguments) every 1/`TOKENS_PER_SECOND`. The
fake Slack notes, per thread, when `chat.startStream` arrives carrying text. So

    overhead = (event sent → first text at Slack) − TTFT

is what threadgate adds: admission, the ack, the claim, the request to the model, reading
the stream, decoding the reply's text, rendering, the call to Slack. Reported as p50/p95/p99
over every event, with the time the whole reply took to stream as a check that the model
pace held.

Each rate runs in one of two shapes: `all` (one `threadgate serve`, the default
deployment) or `split` (an ingress and `WORKERS` worker processes, `serve --role`), whose
streams are spread over processes and so over cores. Every run reports the CPU each
part used per answered event (the gateway processes together, Postgres, and this
process: the fake model, the fake Slack and the load generator), which says what a rate
needs: rate × the sum of the three, in cores.

    .venv/bin/python -m bench.first_text [RATE ...] [--shape all|split]
    .venv/bin/python -m bench.first_text --profile RATE
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from bench import loadgen, profile
from bench import run as bench_run
from bench.cpu import postgres_cpu, postmaster, process_cpu
from bench.loadgen import TimedSlack
from bench.roles import processes
from bench.slow_host import NoCgroups, slower
from bench.stack import scratch_database
from tests.fakes.openai_api import OpenAIServer, RecordedRequest, reply_with_tool
from tests.fakes.slack_api import Body, Params
from tests.gateway.rig import BOT_TOKEN
from tests.pg import server_dsn

RATE = 100
SECONDS = 10
WARMUP = 20
TTFT = 0.5
TOKENS_PER_SECOND = 100.0
ANSWER = "Streaming works: these words show while the model is still writing the rest. " * 4
# Streaming as deployed (appends at most once a second per message, the default), with
# enough workers for every reply streaming at once (a stream holds its worker ~1.5 s).
STREAMING = {"THREADGATE_STREAMING": "true", "THREADGATE_WORKERS": "200"}
WORKERS = 2
# (name, the roles of its processes): the first process takes the events.
SHAPES = {"all": ("all",), "split": ("ingress", *("worker",) * WORKERS)}


class Paced:
    """A streamed completion: `ttft` seconds of silence, then one event per `1/rate` s.

    The events after the first are written by a `Pacer`, shared by every stream."""

    def __init__(self, chunks: list[bytes], ttft: float, pacer: Pacer) -> None:
        self._chunks, self._ttft, self._pacer = chunks, ttft, pacer

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.content_type = "text/event-stream"
        await response.prepare(request)
        await asyncio.sleep(self._ttft)  # the model "thinking": what is being simulated
        # The gateway stops reading at the finish event and may close first.
        with contextlib.suppress(ConnectionError):
            await response.write(self._chunks[0])
            await self._pacer.stream(response, self._chunks[1:])
            await response.write_eof()
        return response


class _Stream:
    __slots__ = ("done", "due", "pending", "response")

    def __init__(self, response: web.StreamResponse, chunks: list[bytes], due: float) -> None:
        self.response, self.pending, self.due = response, list(reversed(chunks)), due
        self.done = asyncio.get_running_loop().create_future()


class Pacer:
    """Writes each stream's next event when it is due, one event per `pause` seconds.

    Why not a sleep per event per stream: at 100 events/s some 150 replies stream at once,
    and a wake-up of each one's task for each of its events (9,000 a second) was the most
    of this process's CPU, which shares the machine's two cores with the gateway and
    Postgres (a real model's CPU is somebody else's). Streams are grouped by the phase of
    their events within a pause (`PHASES` groups), each group woken by one timer: an
    event goes out at most `pause / PHASES` after its time, never before it, and the
    pace does not drift (each event is due one pause after the last one's due time)."""

    PHASES = 10

    def __init__(self, rate: float) -> None:
        self._pause = 1 / rate
        self._groups: list[list[_Stream]] = [[] for _ in range(self.PHASES)]
        self._tickers: list[asyncio.Task[None] | None] = [None] * self.PHASES

    async def stream(self, response: web.StreamResponse, chunks: list[bytes]) -> None:
        """Write `chunks` to `response`, the first one pause from now; raises the
        `ConnectionError` a write met (the reader went away)."""
        if not chunks:
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + self._pause
        width = self._pause / self.PHASES
        phase = int(due % self._pause // width)
        stream = _Stream(response, chunks, due)
        self._groups[phase].append(stream)
        if self._tickers[phase] is None:
            self._tickers[phase] = asyncio.create_task(self._tick(phase, width))
        await stream.done  # cancelled (the server is closing): the ticker drops it

    async def _tick(self, phase: int, width: float) -> None:
        loop = asyncio.get_running_loop()
        group = self._groups[phase]
        try:
            while group:
                # The group's streams are due within `width` of one another: wake for
                # the last of them due in this pause, so none is written early.
                soonest = min(s.due for s in group)
                await asyncio.sleep(max(0.0, soonest + width - loop.time()))
                now = loop.time()
                for stream in [s for s in group if s.due <= now]:
                    if stream.done.done():  # its request was cancelled: write no more
                        group.remove(stream)
                        continue
                    try:
                        await stream.response.write(stream.pending.pop())
                    except ConnectionError as exc:
                        stream.pending.clear()
                        stream.done.set_exception(exc)
                    else:
                        stream.due += self._pause
                        if not stream.pending:
                            stream.done.set_result(None)
                    if not stream.pending:
                        group.remove(stream)
        finally:
            self._tickers[phase] = None


# Every answer is the same, so its SSE events are encoded once: encoding them again for
# each request was a third of the fake model's CPU, which here shares the machine's two
# cores with the gateway (a real model's CPU is somebody else's).
CHUNKS = reply_with_tool("final_reply", {"text": ANSWER}).chunks()


def paced(pacer: Pacer) -> Callable[[RecordedRequest], Paced]:
    return lambda seen: Paced(CHUNKS, TTFT, pacer)


class StreamTimedSlack(TimedSlack):
    """Notes when each thread's stream starts with text, and when it is stopped."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.first_text: dict[str, float] = {}
        self.stopped: dict[str, float] = {}
        self._thread_of: dict[str, str] = {}

    def _chat_start_stream(self, params: Params) -> Body:
        arrived = time.perf_counter()
        body = super()._chat_start_stream(params)
        thread = str(params.get("thread_ts") or "")
        chunks = params.get("chunks") or []
        if body.get("ok") and any(c.get("type") == "markdown_text" for c in chunks):
            self.first_text.setdefault(thread, arrived)
            self._thread_of[str(body["ts"])] = thread
        return body

    def _chat_stop_stream(self, params: Params) -> Body:
        arrived = time.perf_counter()
        body = super()._chat_stop_stream(params)
        thread = self._thread_of.get(str(params.get("ts")))
        if body.get("ok") and thread:
            self.stopped.setdefault(thread, arrived)
        return body


async def measure(
    server: str,
    data: Path,
    run: int,
    rate: int = RATE,
    profile_to: Path | None = None,
    shape: str = "all",
    slow: bool = False,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One run; `slow`: on a host a third slower (bench/slow_host.py) while measured;
    `env`: settings beside `STREAMING`'s."""
    async with (
        scratch_database(server, f"bench_first{run}_{shape}") as dsn,
        StreamTimedSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
    ):
        slack.add_user("U0A1B2C3D4E", name="ada", display_name="Ada")
        model.default = paced(Pacer(TOKENS_PER_SECOND))
        settings = {**STREAMING, **(env or {})}
        async with processes(dsn, SHAPES[shape], slack, model, data, settings) as running:
            url = running[0].events_url
            pids = [p.proc.pid for p in running if p.proc is not None]
            warm = await loadgen.open_loop(url, WARMUP, WARMUP)
            warm_threads = {s.thread_ts for s in warm}
            with contextlib.suppress(AssertionError):  # the run's own figures tell
                await slack.wait_until(lambda: warm_threads <= slack.stopped.keys(), 30)
            spy = None
            if profile_to is not None:
                spy = await profile.start(pids[-1], profile_to, SECONDS)

            def cpu() -> tuple[float, float, float]:
                # Which process was busy: the gateway's, Postgres, or this one (the fake
                # model streaming every reply, the fake Slack, the load generator).
                ours = sum(process_cpu(pid) for pid in pids)
                return ours, postgres_cpu(server), process_cpu(os.getpid())

            with (
                loadgen.no_pauses(),
                slower(pids, postmaster(server)) if slow else contextlib.nullcontext(),
            ):
                cpu0 = cpu()
                started = time.perf_counter()
                samples = await loadgen.open_loop(url, rate, rate * SECONDS)
                if spy is not None:
                    await spy.wait()
                threads = {s.thread_ts for s in samples}
                with contextlib.suppress(AssertionError):  # counted below, not required
                    await slack.wait_until(lambda: threads <= slack.stopped.keys(), 90)
                elapsed = time.perf_counter() - started
                cores = [(b - a) / elapsed for a, b in zip(cpu0, cpu(), strict=True)]
    first = [
        (slack.first_text[s.thread_ts] - s.sent) * 1000
        for s in samples
        if s.thread_ts in slack.first_text
    ]
    whole = [
        (slack.stopped[s.thread_ts] - s.sent) * 1000
        for s in samples
        if s.thread_ts in slack.stopped
    ]
    overhead = [ms - TTFT * 1000 for ms in first]
    return {
        "rate": rate,
        "shape": shape,
        "slow": slow,
        "processes": len(SHAPES[shape]),
        "events": len(samples),
        "shown": len(first),
        "completed": len(whole),
        "posts": len(slack.posts),
        "first_p50": loadgen.percentile(first, 0.5) if first else float("nan"),
        "overhead_p50": loadgen.percentile(overhead, 0.5) if overhead else float("nan"),
        "overhead_p95": loadgen.percentile(overhead, 0.95) if overhead else float("nan"),
        "overhead_p99": loadgen.percentile(overhead, 0.99) if overhead else float("nan"),
        "whole_p50": loadgen.percentile(whole, 0.5) if whole else float("nan"),
        "ack_p99": loadgen.percentile([s.ack_ms for s in samples], 0.99),
        "sender_lag_ms": loadgen.sender_lag_ms(samples),
        "cores": dict(zip(("gateway", "postgres", "bench"), cores, strict=True)),
        # CPU per answered event, in ms: what says whether a rate fits on the machine.
        "cpu_ms_per_event": {
            name: round(share * elapsed * 1000 / max(len(samples), 1), 2)
            for name, share in zip(("gateway", "postgres", "bench"), cores, strict=True)
        },
    }


# The rates `make bench` runs in one process, then the split shape at the target's rate.
# The target's rate runs three times in one process: at the edge of what the machine
# carries, one 10 s run's tail moves by a factor of two from one run to the next, and the
# report takes the median run.
# Then the target's rate three times more on a host a third slower (bench/slow_host.py),
# its margin: where this machine lets us slow it.
RUNS = (*(("all", r) for r in (1, 10, 25, 50)), *(("all", RATE),) * 3, ("split", RATE))
SLOW_RUNS = (("all", RATE),) * 3


async def run_all(
    dsn: str,
    data: Path,
    runs: tuple[tuple[str, int], ...] = RUNS,
    slow_runs: tuple[tuple[str, int], ...] = SLOW_RUNS,
) -> dict[str, Any]:
    results = []
    plan = [(shape, rate, False) for shape, rate in runs]
    plan += [(shape, rate, True) for shape, rate in slow_runs]
    slow_skipped = None
    for run, (shape, rate, slow) in enumerate(plan):
        try:
            figures = await measure(dsn, data, run, rate, shape=shape, slow=slow)
        except NoCgroups as exc:
            slow_skipped = str(exc)
            continue
        print(f"  first-text run {run}: {figures}", flush=True)
        results.append(figures)
    return {
        "rate": RATE,
        "seconds": SECONDS,
        "ttft_ms": TTFT * 1000,
        "tokens_per_second": TOKENS_PER_SECOND,
        "workers": WORKERS,
        "runs": results,
        "slow_skipped": slow_skipped,
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.first_text", description=__doc__)
    p.add_argument("rates", nargs="*", type=int, help="events/s (default: make bench's runs)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="all")
    p.add_argument("--profile", action="store_true", help="py-spy the last process (one rate)")
    p.add_argument("--slow", action="store_true", help="on a host a third slower (cgroups)")
    args = p.parse_args()

    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            server = await server_dsn(Path(tmp))
            if args.profile:
                out = Path(tmp) / "first_text.raw"
                rate = args.rates[0] if args.rates else RATE
                print(await measure(server, Path(tmp), 0, rate, out, args.shape))
                print(json.dumps(profile.summarize(out), indent=1))
                print(json.dumps(profile.by_caller(out), indent=1))
                return
            runs = tuple((args.shape, r) for r in args.rates) or RUNS
            if args.slow:
                await run_all(server, Path(tmp), (), runs)
            else:
                await run_all(server, Path(tmp), runs, ())

    bench_run(run())


if __name__ == "__main__":
    main()
