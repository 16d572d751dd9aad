"""Reading images and PDFs in a bounded, killable place: a few decoder processes.

Decoding untrusted bytes can cost far more than the bytes: a 190 KB PNG declares
7000×7000 pixels (147 MB decoded), a 200 KB PDF whose pages share one inflating content
stream costs hours of CPU. `file_contents` refuses what it can see coming (decoded size
from the header, page and text caps); what it cannot is bounded here, and the gateway's
own memory and event loop never pay for it:

- each decode runs in a decoder process (`gateway.inbound.decoder_process`) whose address
  space is capped (RLIMIT_AS, `THREADGATE_FILE_DECODE_MEMORY_MB`) and whose CPU is
  limited to the time left (RLIMIT_CPU);
- at the deadline the process is killed (SIGKILL) and another started in its place, so
  nothing keeps running after it (a thread, as `asyncio.to_thread` gave, cannot be
  stopped: it ran on for hours after its deadline);
- at most `THREADGATE_FILE_DECODERS` decodes are in flight in the process, one per
  decoder process (a semaphore); a file that finds none free by the deadline is not read
  ("too many files were being read at once");
- the processes start on first use and stay warm (a start costs a few hundred
  milliseconds of the pre-ack budget: Python, Pillow and pypdf, never `agent`); they are
  killed when the gateway stops.

They speak length-prefixed frames over their stdin and stdout — a JSON header and raw
bytes — not pickle: a decoder that Pillow's bugs had let a file take over could make a
pickle run code in the gateway; a frame is data, and its reply is checked.

Why not a library: `concurrent.futures.ProcessPoolExecutor` cannot stop a running call
(`cancel` only drops queued ones) and a killed worker breaks the whole pool; `pebble`
and `aiomultiprocess` kill on timeout but pickle results, set no resource limits and run
their own threads beside our loop. What we need is small: start, limit, talk, kill.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import signal
import sys
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from gateway.inbound.decoder_process import FRAME_HEADER, READY
from gateway.inbound.reasons import (
    BUSY,
    DECODER_FAILED,
    NO_TEXT_LAYER,
    NOT_A_PDF,
    NOT_AN_IMAGE,
    TOO_LARGE_DECODED,
    TOO_SLOW,
    NotRead,
)

log = logging.getLogger(__name__)

Decodable: TypeAlias = Literal["image", "pdf"]

# What a reply's header may be: a decoder answers with these or it is not believed.
_PROBLEMS = frozenset({NOT_AN_IMAGE, TOO_LARGE_DECODED, NOT_A_PDF, NO_TEXT_LAYER, DECODER_FAILED})
_PICTURE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# The most a reply may carry: a picture within the providers' 3.75 MB, or the text.
_MAX_REPLY = 8_000_000


@dataclass(frozen=True, slots=True)
class Decoded:
    """What a decoder read: a picture (its type and bytes) or a PDF's text ("" for a
    scan), its page count and the text of each page read."""

    text: str | None = None
    media_type: str | None = None
    data: bytes = b""
    pages: int = 0
    page_texts: tuple[str, ...] = ()


class Decoders:
    """The process's decoder processes; one per gateway process, closed with it."""

    def __init__(self, *, processes: int, memory_bytes: int) -> None:
        self._processes = processes
        self._memory_bytes = memory_bytes
        self._slots = asyncio.Semaphore(processes)
        self._idle: deque[_Decoder] = deque()
        self._live: set[_Decoder] = set()  # idle or busy, started and not yet killed
        self._reaping: set[asyncio.Future[int | None]] = set()  # killed, not yet gone
        self._closed = False

    def warm(self, files: int) -> None:
        """Have a decoder process ready, or starting, for each of `files` (as many as
        there may be), without waiting for them."""
        wanted = min(files, self._processes) - len(self._idle)
        while not self._closed and wanted > 0 and len(self._live) < self._processes:
            self._idle.append(self._new())
            wanted -= 1

    async def decode(
        self, kind: Decodable, data: bytes, deadline: float, *, max_chars: int = 0
    ) -> Decoded:
        """The picture or text in `data` (a PDF's, read until past `max_chars`), or
        `NotRead` saying why not, by `deadline` (event-loop time); whatever runs for it
        is stopped by then."""
        try:
            async with asyncio.timeout_at(deadline):
                await self._slots.acquire()
        except TimeoutError:
            raise NotRead(BUSY) from None
        try:
            request = {"kind": kind, "max_chars": max_chars}
            return await self._run(self._take(), request, data, deadline)
        finally:
            self._slots.release()

    def _take(self) -> _Decoder:
        """An idle decoder that is still alive, or a new one."""
        while self._idle:
            decoder = self._idle.popleft()
            if not decoder.ended:
                return decoder
            self._kill(decoder)
        return self._new()

    async def _run(
        self, decoder: _Decoder, request: dict[str, Any], data: bytes, deadline: float
    ) -> Decoded:
        try:
            async with asyncio.timeout_at(deadline):
                process = await asyncio.shield(decoder.ready)
        except TimeoutError:
            self._idle.append(decoder)  # still starting: the next file gets it
            raise NotRead(TOO_SLOW) from None
        except Exception as exc:
            self._kill(decoder)
            raise NotRead(DECODER_FAILED) from exc
        cpu_seconds = max(1, math.ceil(deadline - asyncio.get_running_loop().time()))
        try:
            async with asyncio.timeout_at(deadline):
                header, body = await _exchange(
                    process, request | {"cpu_seconds": cpu_seconds}, data
                )
        except TimeoutError:
            self._kill(decoder)
            raise NotRead(TOO_SLOW) from None
        except (OSError, EOFError, ValueError, asyncio.IncompleteReadError) as exc:
            raise NotRead(_why_ended(await self._kill(decoder))) from exc
        except BaseException:
            self._kill(decoder)
            raise
        if header.get("retiring") is True:
            self._kill(decoder)  # it exits after a decode that ran out of memory
        else:
            self._idle.append(decoder)
        return _decoded(header, body)

    def _new(self) -> _Decoder:
        decoder = _Decoder(self._memory_bytes)
        self._live.add(decoder)
        return decoder

    def _kill(self, decoder: _Decoder) -> asyncio.Future[int | None]:
        """SIGKILL `decoder` now; the next file starts another. Its exit status once it is
        gone (`close` waits for every one)."""
        decoder.kill()
        self._live.discard(decoder)
        reaping = asyncio.ensure_future(decoder.reap())
        self._reaping.add(reaping)
        reaping.add_done_callback(self._reaping.discard)
        return reaping

    async def close(self) -> None:
        """Kill every decoder process, busy or not, and wait for them to go."""
        self._closed = True
        self._idle.clear()
        for decoder in list(self._live):
            self._kill(decoder)
        await asyncio.gather(*self._reaping, return_exceptions=True)


class _Decoder:
    """One decoder process, starting as soon as it is made."""

    def __init__(self, memory_bytes: int) -> None:
        self._process: asyncio.subprocess.Process | None = None
        self.ready = asyncio.ensure_future(self._start(memory_bytes))
        self.ready.add_done_callback(_retrieve)

    async def _start(self, memory_bytes: int) -> asyncio.subprocess.Process:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway.inbound.decoder_process",
            str(memory_bytes),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self._process.stdout is not None
        if await self._process.stdout.readline() != READY:
            raise EOFError("the decoder process ended before it was ready")
        return self._process

    @property
    def ended(self) -> bool:
        return self._process is not None and self._process.returncode is not None

    def kill(self) -> None:
        """SIGKILL, now."""
        self.ready.cancel()
        if self._process is not None and self._process.returncode is None:
            self._process.kill()

    async def reap(self) -> int | None:
        """The exit status of a killed decoder, once it is gone and its pipes are closed
        (the stdout read to its end: a pipe with unread bytes is never let go of)."""
        if self._process is None:
            return None
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.close()
        await self._process.stdout.read()
        return await self._process.wait()


async def _exchange(
    process: asyncio.subprocess.Process, request: dict[str, Any], data: bytes
) -> tuple[dict[str, Any], bytes]:
    assert process.stdin is not None and process.stdout is not None
    encoded = json.dumps(request).encode()
    process.stdin.write(FRAME_HEADER.pack(len(encoded), len(data)) + encoded + data)
    await process.stdin.drain()
    header_length, data_length = FRAME_HEADER.unpack(
        await process.stdout.readexactly(FRAME_HEADER.size)
    )
    if header_length + data_length > _MAX_REPLY:
        raise ValueError("a decoder's reply is larger than any it may send")
    header = json.loads(await process.stdout.readexactly(header_length))
    if not isinstance(header, dict):
        raise ValueError("a decoder's reply is not an object")
    return header, await process.stdout.readexactly(data_length)


def _decoded(header: dict[str, Any], body: bytes) -> Decoded:
    """The reply, believed only in the shapes a decoder sends."""
    problem, text, media_type = header.get("problem"), header.get("text"), header.get("media_type")
    if isinstance(problem, str):
        raise NotRead(problem if problem in _PROBLEMS else DECODER_FAILED)
    if isinstance(text, str):
        pages, page_texts = header.get("pages"), header.get("page_texts")
        return Decoded(
            text=text,
            pages=pages if isinstance(pages, int) and pages >= 0 else 0,
            page_texts=tuple(t if isinstance(t, str) else "" for t in page_texts)
            if isinstance(page_texts, list)
            else (),
        )
    if media_type in _PICTURE_TYPES and body:
        return Decoded(media_type=str(media_type), data=body)
    raise NotRead(DECODER_FAILED)


def _retrieve(ready: asyncio.Future[asyncio.subprocess.Process]) -> None:
    """A start that failed is reported where the decoder is used, or not at all."""
    if not ready.cancelled():
        ready.exception()


def _why_ended(returncode: int | None) -> str:
    """A decoder that went away mid-file: its CPU limit (SIGXCPU), or something else."""
    if returncode == -signal.SIGXCPU:
        return TOO_SLOW
    log.warning("a decoder process ended mid-file (exit status %s)", returncode)
    return DECODER_FAILED
