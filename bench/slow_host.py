"""A host a third slower, for the length of a measurement: CPU quotas from Linux cgroups.

The first-text target must hold "on a host a third slower than the one it was tuned on":
its margin, not its best run. A slower core runs the same work in 3/2 the time, so a
process gets 2/3 of the work done per second of wall time that it got here; a CFS quota of
2/3 of what it could use gives it that much, in slices of a short period. Only the parts
that would run on that host are slowed: each gateway process (one event loop holds one
core at most: 2/3 of a core each) and the Postgres server (its backends on every core:
2/3 of each, together); the benchmark process — the fake Slack, the fake model, the load
generator — runs as before.

Two differences from a slower core, said where the figures are: a quota throttles in
slices (at most a third of each `PERIOD_US` spent stopped, where a slower core is steady),
and memory and I/O are as fast as here.

This needs root and a writable cgroup `cpu` controller (v1 `cpu.cfs_quota_us`, or v2
`cpu.max`); without them `slower` says so and the measurement is not made.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

SPEED = 2 / 3  # a host a third slower: 2/3 of the work per second
PERIOD_US = 10_000  # short slices: a throttled process stops for at most 3.3 ms at a time
_V1 = Path("/sys/fs/cgroup/cpu")
_V2 = Path("/sys/fs/cgroup")


class NoCgroups(Exception):
    """This machine lets us set no CPU quota (not root, or no writable cpu controller)."""


def _root() -> tuple[Path, bool]:
    """The cgroup hierarchy to make groups in, and whether it is v2."""
    if (_V1 / "cpu.cfs_quota_us").exists() and os.access(_V1, os.W_OK):
        return _V1, False
    controllers = _V2 / "cgroup.controllers"
    if controllers.exists() and os.access(_V2, os.W_OK) and "cpu" in controllers.read_text():
        return _V2, True
    raise NoCgroups("no writable cgroup cpu controller here (root and cgroupfs are needed)")


@contextlib.contextmanager
def _group(name: str, cores: float, pids: list[int]) -> Iterator[None]:
    root, v2 = _root()
    group = root / name
    group.mkdir(exist_ok=True)
    quota = round(cores * PERIOD_US)
    if v2:
        (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
    else:
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(quota))
    moved = [pid for pid in pids if _move(group, pid)]
    try:
        yield
    finally:
        for pid in moved:
            _move(root, pid)
        with contextlib.suppress(OSError):  # a process still inside keeps it: left to the OS
            group.rmdir()


def _move(group: Path, pid: int) -> bool:
    try:
        (group / "cgroup.procs").write_text(str(pid))
    except (ProcessLookupError, OSError):
        return False  # it exited meanwhile
    return True


def postgres_pids(postmaster: int) -> list[int]:
    """The postmaster and every process it started (backends, background workers)."""
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = (entry / "stat").read_text()
                if int(stat[stat.rindex(")") + 2 :].split()[1]) == postmaster:
                    pids.append(int(entry.name))
    return pids


@contextlib.contextmanager
def slower(gateways: list[int], postmaster: int | None) -> Iterator[None]:
    """Run the `gateways` processes and the Postgres server at `SPEED` until the block ends;
    `NoCgroups` when this machine cannot."""
    stack = contextlib.ExitStack()
    with stack:
        for pid in gateways:
            stack.enter_context(_group(f"threadgate-bench-gw{pid}", SPEED, [pid]))
        if postmaster is not None:
            pids = postgres_pids(postmaster)
            cores = SPEED * (os.cpu_count() or 1)
            stack.enter_context(_group("threadgate-bench-pg", cores, pids))
        yield
