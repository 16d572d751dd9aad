"""How late each event loop of the process runs: `threadgate_event_loop_lag_seconds{loop}`.

Why: when a loop has more ready callbacks than it can run, everything on it waits its
turn, and nothing else shows it: the database answers fast, Slack answers fast, and still
an ack or a reply's first words come late. A timer that asks to wake every `EVERY_SECONDS`
and notes how late it woke measures exactly that wait. One per loop: in one `serve` the
ingress has a loop of its own (gateway/process/ingress_thread.py), and its lag staying low
while the workers' grows is what that split is for. The cost is one timer wake-up a
quarter of a second.
"""

from __future__ import annotations

import asyncio

from prometheus_client import Histogram

EVERY_SECONDS = 0.25


async def watch_lag(histogram: Histogram, every: float = EVERY_SECONDS) -> None:
    """Observe into `histogram` how late each wake-up of this loop's timer came, until
    cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + every
        await asyncio.sleep(every)
        histogram.observe(max(0.0, loop.time() - due))
