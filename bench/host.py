"""How fast this host runs Python right now: one fixed workload, timed, so that runs measured
on different days (or on different machines of the same kind) can be compared.

Why: in one day the same code measured a first-text p99 of 88-244 ms in one hour and
347-1,600 ms in another, and on a later machine every part (the gateway, Postgres, the
fakes) took about twice the CPU per event with nothing changed. A figure that only says
"missed" cannot tell a slower gateway from a slower host; this one can. The workload is
pure Python on one core, the kinds of work a gateway's CPU goes to (JSON both ways, dict
and string work, a regex, small objects), with no I/O. Each repeat runs in a fresh
interpreter; the best of `REPEATS` is the host with the least disturbance, the median what
a run could expect.

    .venv/bin/python -m bench.host
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPEATS = 5
ROUNDS = 4_000

_WORDS = re.compile(r"[a-z]+://[^\s<>]+|\w+")


@dataclass(frozen=True)
class _Event:
    channel: str
    user: str
    text: str


def workload() -> None:
    """The fixed work: about 0.2 s on this project's machines."""
    for n in range(ROUNDS):
        body = {
            "type": "event_callback",
            "event": {"type": "app_mention", "channel": f"C{n:08d}", "user": "U0A1B2C3D4E"},
            "text": f"see https://example.com/{n} and tell me about item {n} " * 4,
            "blocks": [{"type": "rich_text", "elements": [{"type": "text", "text": str(n)}]}],
        }
        parsed = json.loads(json.dumps(body))
        event = _Event(parsed["event"]["channel"], parsed["event"]["user"], parsed["text"])
        counts: dict[str, int] = {}
        for word in _WORDS.findall(event.text):
            counts[word] = counts.get(word, 0) + 1
        rendered = "".join(f"<{k}:{v}>" for k, v in sorted(counts.items()))
        assert rendered and event.channel.startswith("C")


def once() -> float:
    """Milliseconds the workload took in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", "import bench.host as h; h._time_here()"],
        check=True,
        cwd=Path(__file__).parents[1],
        capture_output=True,
        text=True,
    )
    return float(done.stdout.strip())


def _time_here() -> None:
    workload()  # warm: imports, the regex, the first allocations
    started = time.perf_counter()
    workload()
    print(f"{(time.perf_counter() - started) * 1000:.1f}")


def measure() -> dict[str, Any]:
    """The workload's best and median time over `REPEATS` fresh interpreters, in ms."""
    times = [once() for _ in range(REPEATS)]
    return {"best_ms": min(times), "median_ms": statistics.median(times), "times_ms": times}


if __name__ == "__main__":
    print(json.dumps(measure()))
