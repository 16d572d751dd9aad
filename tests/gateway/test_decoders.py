"""The decoder processes (gateway/inbound/decoders.py), real ones: what they read, what
they refuse, and that nothing of theirs runs on past a deadline or a close."""

from __future__ import annotations

import asyncio
import io
import os
import re
from collections.abc import AsyncIterator

import pytest
from PIL import Image as PILImage

from gateway.inbound.decoders import Decoders
from gateway.inbound.reasons import BUSY, NOT_AN_IMAGE, TOO_LARGE_DECODED, TOO_SLOW, NotRead
from tests.fakes.crafted_files import pdf_bomb, png_bomb
from tests.gateway.test_files_end_to_end import text_pdf


@pytest.fixture
async def decoders() -> AsyncIterator[Decoders]:
    decoders = Decoders(processes=1, memory_bytes=512 * 2**20)
    yield decoders
    await decoders.close()


def deadline(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


async def test_a_picture_and_a_pdf_are_read_one_after_the_other(decoders: Decoders) -> None:
    """A PNG over the providers' size is scaled (a JPEG now); a PDF gives its text; the
    same decoder process serves both."""
    out = io.BytesIO()
    PILImage.new("RGB", (3000, 1000), (9, 9, 9)).save(out, "PNG")
    picture = await decoders.decode("image", out.getvalue(), deadline(30))
    assert picture.media_type == "image/jpeg"
    with PILImage.open(io.BytesIO(picture.data)) as scaled:
        assert scaled.size == (1568, 523)
    pdf = await decoders.decode("pdf", text_pdf("Hello there"), deadline(30), max_chars=100)
    assert pdf.text == "Hello there"


async def test_what_is_not_an_image_or_too_large_decoded_is_refused(decoders: Decoders) -> None:
    """Garbage behind PNG magic is not an image; 7000×7000 declared is too large once
    decoded, refused from the header."""
    for data, reason in [
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, NOT_AN_IMAGE),
        (png_bomb(), TOO_LARGE_DECODED),
    ]:
        with pytest.raises(NotRead, match=re.escape(reason)):
            await decoders.decode("image", data, deadline(30))


async def test_a_decode_past_its_deadline_is_killed_and_the_next_waits_or_is_busy(
    decoders: Decoders,
) -> None:
    """One decoder process: the PDF bomb is stopped at its deadline and its process killed
    (none is left); a second file waiting for the only decoder past its own deadline is
    not read (busy)."""
    bomb = pdf_bomb()
    # Tasks start in order: the first takes the only decoder before the second asks.
    first, second = await asyncio.gather(
        decoders.decode("pdf", bomb, deadline(3), max_chars=100),
        decoders.decode("pdf", bomb, deadline(0.5), max_chars=100),
        return_exceptions=True,
    )
    assert isinstance(first, NotRead) and first.reason == TOO_SLOW
    assert isinstance(second, NotRead) and second.reason == BUSY
    async with asyncio.timeout(10):
        while decoder_processes():  # noqa: ASYNC110 - SIGKILL lands when the kernel delivers it
            await asyncio.sleep(0.05)


def decoder_processes() -> list[int]:
    """The live decoder processes this process started."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    command = cmdline.read()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[1]) == me and fields[0] != "Z" and b"decoder_process" in command:
                found.append(int(entry))
    return found
