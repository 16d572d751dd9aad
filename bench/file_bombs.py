"""Benchmark: what a crafted file costs the gateway process (issue 37).

A real `threadgate serve` child gets, in a DM, a PNG declaring 7000×7000 pixels (about
140 KB, 147 MB decoded) or a PDF whose 50 pages share one FlateDecode content stream
(about 30 KB, minutes of pypdf per page) — `tests/fakes/crafted_files.py` — and at the
same moment a plain DM from someone else. Reported per file: how long the plain
message's ack took (and a plain message's alone, before, for comparison), the growth of
the gateway's peak RSS (VmHWM), and the CPU the gateway and its child processes used
from the send until it was idle again (no thread of it running), or until `WATCH`
seconds if it never was (then `still_running` is true).

    .venv/bin/python -m bench.file_bombs
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench import run as bench_run
from bench.stack import fakes, gateway
from tests.fakes.crafted_files import pdf_bomb, png_bomb
from tests.fakes.slack_events import deliver, dm_message_event, event_callback, file_share_event
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import SECRET
from tests.pg import server_dsn

WATCH = 30.0
FILES = {
    "png": ("bomb.png", "image/png", png_bomb),
    "pdf": ("bomb.pdf", "application/pdf", pdf_bomb),
}


async def timed_ack(http: aiohttp.ClientSession, url: str, user: str, channel: str) -> float:
    envelope = event_callback(dm_message_event(text="plain hello", user=user, channel=channel))
    started = time.perf_counter()
    status, _ = await deliver(http, url, envelope, SECRET)
    assert status == 200
    return time.perf_counter() - started


async def idle_or_watched(gw: GatewayProcess) -> bool:
    """Wait until no thread of the gateway or its children runs; False if it never did."""
    deadline = time.monotonic() + WATCH
    while time.monotonic() < deadline:
        if not gw.running_threads():
            return True
        await asyncio.sleep(0.05)
    return False


async def one(dsn: str, data: Path, kind: str) -> dict[str, Any]:
    name, mimetype, craft = FILES[kind]
    content = craft()
    async with (
        fakes() as (slack, model),
        gateway(dsn, f"file_bombs_{kind}", slack, model, data) as gw,
        aiohttp.ClientSession() as http,
    ):
        alone = await timed_ack(http, gw.events_url, "U0C1B2C3D4A", "D0C1B2C3D4A")
        await slack.wait_for_posts(1, timeout=60)
        await idle_or_watched(gw)
        file = slack.files.add_file(name, content, mimetype=mimetype, filetype=kind)
        peak, cpu = gw.peak_rss_kib(), gw.cpu_seconds()
        bomb = event_callback(file_share_event(files=[file]))
        _, beside = await asyncio.gather(
            deliver(http, gw.events_url, bomb, SECRET),
            timed_ack(http, gw.events_url, "U0D1B2C3D4A", "D0D1B2C3D4A"),
        )
        await slack.wait_for_posts(3, timeout=60)
        idle = await idle_or_watched(gw)
        return {
            "file_bytes": len(content),
            "plain_ack_alone_s": round(alone, 3),
            "plain_ack_beside_s": round(beside, 3),
            "peak_rss_growth_mib": round((gw.peak_rss_kib() - peak) / 1024, 1),
            "cpu_s": round(gw.cpu_seconds() - cpu, 2),
            "still_running": not idle,
        }


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dsn = await server_dsn(Path(tmp))
        for kind in FILES:
            print(kind, await one(dsn, Path(tmp), kind))


if __name__ == "__main__":
    bench_run(main())
