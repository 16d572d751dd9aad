"""py-spy against the gateway process: start a recording, then read the raw stacks back.

`py-spy record --format raw` writes one line per distinct stack: `frame;frame;… count`,
root first, each frame `function (file:line)`. The summary gives each function's
inclusive share (samples whose stack contains it), the leaf (self) share, and self time
grouped by where the code lives (our packages, asyncpg, aiohttp, bolt, asyncio, …).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")
_AREAS = (
    ("gateway/", "threadgate gateway/"),
    ("agent/", "threadgate agent/"),
    ("storage/", "threadgate storage/"),
    ("asyncpg", "asyncpg"),
    ("slack_bolt", "slack_bolt"),
    ("slack_sdk", "slack_sdk"),
    ("aiohttp", "aiohttp"),
    ("httpx", "httpx/httpcore"),
    ("httpcore", "httpx/httpcore"),
    ("pydantic", "pydantic"),
    ("logging", "logging"),
    ("json", "json"),
    ("asyncio", "asyncio"),
)


def py_spy() -> str:
    venv = Path(sys.executable).with_name("py-spy")
    return str(venv) if venv.exists() else shutil.which("py-spy") or "py-spy"


async def start(
    pid: int, out: Path, seconds: float, kind: str = "raw"
) -> asyncio.subprocess.Process:
    """Record `pid` for `seconds` at 200 Hz. Blocking mode: each sample pauses the process,
    which costs it latency but gives whole stacks (`--nonblocking` tears ~40% of them)."""
    args = ["record", "--pid", str(pid), "--format", kind, "--rate", "200"]
    args += ["--duration", str(round(seconds)), "--output", str(out)]
    return await asyncio.create_subprocess_exec(
        py_spy(), *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )


def frame_name(frame: str) -> tuple[str, str]:
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip(), ""
    return match["func"], match["file"]


def area(path: str) -> str:
    return next((name for key, name in _AREAS if key in path), "other")


def read_stacks(raw: Path) -> list[tuple[list[tuple[str, str]], int]]:
    stacks = []
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append(([frame_name(f) for f in stack.split(";")], int(count)))
    return stacks


_PLUMBING = ("runpy", "asyncio/runners.py", "asyncio/base_events.py", "asyncio/events.py")


def _plumbing(func: str, path: str) -> bool:
    """Frames every sample has (the interpreter and the event loop): not worth listing."""
    return func.startswith("<module>") or func == "main" or any(p in path for p in _PLUMBING)


def label(func: str, path: str) -> str:
    short = "/".join(Path(path).parts[-2:]) if path else "?"
    return f"{func} ({short})"


def summarize(raw: Path, top: int = 15) -> dict[str, Any]:
    """Inclusive and self shares of the recorded samples; empty if nothing was recorded."""
    if not raw.exists():
        return {}
    stacks = read_stacks(raw)
    total = sum(count for _, count in stacks)
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    for frames, count in stacks:
        for name in {label(f, p) for f, p in frames if not _plumbing(f, p)}:
            inclusive[name] += count
        leaf[label(*frames[-1])] += count
        areas[area(frames[-1][1])] += count
    share = {k: v / max(total, 1) for k, v in inclusive.most_common(top)}

    def pct(counter: Counter[str]) -> dict[str, float]:
        return {k: v / max(total, 1) for k, v in counter.most_common(top)}

    return {
        "file": str(raw),
        "samples": total,
        "inclusive": share,
        "self": pct(leaf),
        "areas": pct(areas),
    }


def by_caller(raw: Path, top: int = 20) -> dict[str, float]:
    """Each sample charged to its innermost threadgate frame and the library call it made
    there (`our function → library entry`): where our code spends, callees included.
    Samples with no threadgate frame (the event loop, servers' protocol callbacks) are
    grouped by the library that was running."""
    if not raw.exists():
        return {}
    stacks = read_stacks(raw)
    total = sum(count for _, count in stacks)
    charged: Counter[str] = Counter()
    for frames, count in stacks:
        charged[_charge(frames)] += count
    return {k: v / max(total, 1) for k, v in charged.most_common(top)}


_OURS = ("gateway/", "agent/", "storage/")


def _charge(frames: list[tuple[str, str]]) -> str:
    for i in range(len(frames) - 1, -1, -1):
        func, path = frames[i]
        if path.startswith(_OURS) and not path.endswith("cli.py"):
            below = label(*frames[i + 1]) if i + 1 < len(frames) else "itself"
            return f"{label(func, path)} → {below}"
    return f"(no threadgate frame: {area(frames[-1][1])})"
