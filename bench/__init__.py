"""Benchmarks; run one with `python -m bench.<name>`."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a benchmark on the loop the gateway runs on by default (uvloop where it is
    installed, gateway/process/event_loop.py). This process holds the fake Slack, the fake model
    and the load generator, which share the machine's cores with what is measured: on
    uvloop they take about a tenth less of them (4.2-4.6 → 3.8-4.1 ms per event at
    100 events/s in bench/first_text.py)."""
    from gateway.process.event_loop import loop_factory

    with asyncio.Runner(loop_factory=loop_factory("auto")) as runner:
        return runner.run(main)
