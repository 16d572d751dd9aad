"""The open-loop sender in a process of its own, so an ack is timed by a loop with nothing
else to do.

In the benchmark process the sender shares its event loop with the fake Slack and the
fake model, which at 100 streamed replies a second are busy: a 5 ms timer there woke up to
9 ms late, and every ack's arrival was noted that much late, charged to the gateway. Here
the child does nothing but send and time; `time.perf_counter` is the system's monotonic
clock, so its times compare with the fakes' in the parent.

    python -m bench.sender < {"url": …, "rate": …, "events": [...]}  → samples as JSON
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from typing import Any

from bench.loadgen import Sample, open_loop
from tests.fakes.slack_events import event_callback


async def send_apart(url: str, rate: float, events: list[dict[str, Any]]) -> list[Sample]:
    """`open_loop(url, rate, …)` of `events`, run by a child process; its samples. The
    envelopes are made here: event ids are counted per process, and the child's would be
    the ones this process gave its warm-up (Slack's duplicates, to the gateway)."""
    events = [event_callback(event) for event in events]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.sender",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    order = json.dumps({"url": url, "rate": rate, "events": events}).encode()
    out, _ = await proc.communicate(order)
    if proc.returncode != 0:
        raise RuntimeError(f"the sender process failed with exit status {proc.returncode}")
    return [Sample(**fields) for fields in json.loads(out)]


async def _main() -> None:
    order = json.loads(sys.stdin.buffer.read())
    events = order["events"]
    samples = await open_loop(order["url"], order["rate"], len(events), lambda n: events[n])
    json.dump([dataclasses.asdict(s) for s in samples], sys.stdout)


if __name__ == "__main__":
    from gateway.process.event_loop import loop_factory

    with asyncio.Runner(loop_factory=loop_factory("auto")) as runner:
        runner.run(_main())
