"""Files crafted to cost far more than their size cost a real gateway process a bounded
amount (issue 37): a PNG declaring 7000×7000 pixels is refused from its header, a PDF
whose pages share one inflating content stream is stopped at the deadline, and a plain
message sent beside either is acked and answered.

Each test starts `threadgate serve` as a child process, so its memory and CPU are its
own to read from /proc; what they were is printed (`pytest -s`), never asserted against
a clock: bench/file_bombs.py reports the same figures.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.inbound.reasons import TOO_LARGE_DECODED, TOO_SLOW
from gateway.text.provenance import parse_turn
from tests.fakes.crafted_files import pdf_bomb, png_bomb
from tests.fakes.openai_api import OpenAIServer, RecordedRequest
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import deliver, dm_message_event, event_callback, file_share_event
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, SECRET, echo, gateway_env, last_user_text
from tests.pg import create_database

OTHER_USER, OTHER_DM = "U0B1B2C3D4F", "D0B1B2C3D4F"


@dataclass
class Bombarded:
    """What a gateway made of a crafted file sent beside a plain message."""

    file_note: str  # the turn's line about the file
    plain_status: int
    plain_answered: bool
    peak_growth_mib: float
    cpu_seconds: float
    plain_ack_seconds: float


@dataclass
class Stack:
    gateway: GatewayProcess
    slack: FakeSlack
    model: OpenAIServer
    http: aiohttp.ClientSession

    async def bombard(self, name: str, content: bytes, mimetype: str, filetype: str) -> Bombarded:
        """Send the file in a DM and, at the same moment, a plain DM from someone else;
        wait for both answers, and for the gateway to be idle again."""
        file = self.slack.files.add_file(name, content, mimetype=mimetype, filetype=filetype)
        peak, cpu = self.gateway.peak_rss_kib(), self.gateway.cpu_seconds()
        bomb = event_callback(file_share_event(files=[file]))
        plain = event_callback(
            dm_message_event(text="plain hello", user=OTHER_USER, channel=OTHER_DM)
        )
        (bomb_status, _), (plain_status, ack) = await asyncio.gather(
            deliver(self.http, self.gateway.events_url, bomb, SECRET),
            self._timed(plain),
        )
        assert bomb_status == 200
        posts = await self.slack.wait_for_posts(2, timeout=60)
        await _idle(self.gateway)
        return Bombarded(
            file_note=_file_note(self.model.requests, name),
            plain_status=plain_status,
            plain_answered=any("plain hello" in p.text and p.channel == OTHER_DM for p in posts),
            peak_growth_mib=(self.gateway.peak_rss_kib() - peak) / 1024,
            cpu_seconds=self.gateway.cpu_seconds() - cpu,
            plain_ack_seconds=ack,
        )

    async def _timed(self, envelope: dict[str, Any]) -> tuple[int, float]:
        """The delivery's HTTP status, and how long the gateway took to ack it."""
        started = time.monotonic()
        status, _ = await deliver(self.http, self.gateway.events_url, envelope, SECRET)
        return status, time.monotonic() - started


def _file_note(requests: list[RecordedRequest], name: str) -> str:
    for seen in requests:
        text = last_user_text(seen.body)
        if f'"{name}"' in text:
            return parse_turn(text[text.index("<turn ") :]).body
    raise AssertionError(f"no request named {name}")


@pytest.fixture
async def stack(
    postgres_dsn: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Stack]:
    dsn = await create_database(postgres_dsn, request.node.name)
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = echo
        # The whole pre-ack budget Slack's deadline allows: on a loaded machine a decoder's
        # start alone (Python, Pillow, pypdf) has taken most of the default 1.5 s, and the
        # PNG came back "too slow" instead of refused from its header.
        env = gateway_env(slack, model, dsn) | {"THREADGATE_LOOKUP_BUDGET_SECONDS": "2.5"}
        gateway = GatewayProcess(env, tmp_path)
        await gateway.start()
        try:
            yield Stack(gateway, slack, model, http)
        finally:
            assert await gateway.stop() == 0


async def test_a_png_declaring_7000_by_7000_pixels_is_refused_from_its_header(stack: Stack) -> None:
    """A 140 KB PNG that would decode to 147 MB: not read, too large once decoded; the
    gateway's own peak memory grows by far less than the decoded size; the plain message
    beside it is acked and answered."""
    outcome = await stack.bombard("bomb.png", png_bomb(), "image/png", "png")
    print(f"\nPNG bomb: {outcome}")
    assert outcome.file_note.endswith(
        f'"bomb.png" (image/png, 142,954 bytes): {TOO_LARGE_DECODED}]'
    )
    assert outcome.plain_status == 200 and outcome.plain_answered
    assert outcome.peak_growth_mib < 100


async def test_a_pdf_whose_pages_share_one_huge_stream_is_stopped_at_the_deadline(
    stack: Stack,
) -> None:
    """A 30 KB PDF that would take pypdf hours: not read, too slow to read; once it is
    answered nothing of the gateway's runs on (no thread, no child process busy: `bombard`
    waits for that); the plain message beside it is acked and answered."""
    bomb = pdf_bomb()
    outcome = await stack.bombard("bomb.pdf", bomb, "application/pdf", "pdf")
    print(f"\nPDF bomb: {outcome}")
    note = f'"bomb.pdf" (application/pdf, {len(bomb):,} bytes): {TOO_SLOW}]'
    assert outcome.file_note.endswith(note)
    assert outcome.plain_status == 200 and outcome.plain_answered


async def _idle(gateway: GatewayProcess, timeout: float = 30) -> None:  # noqa: ASYNC109
    """Wait until no thread of the gateway or of its children is running, checking every
    50 ms; a decode that ran on after its deadline never lets it happen."""
    async with asyncio.timeout(timeout):
        while gateway.running_threads():  # noqa: ASYNC110 - the state of a child process, polled
            await asyncio.sleep(0.05)
