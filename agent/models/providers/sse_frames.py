"""Server-sent events framed one read at a time, by httpx-sse's own decoders.

Why not `httpx_sse.EventSource.aiter_sse`: it hands events on one at a time, through two
async generators (one for lines, one for events), and a model sends an event every few
characters. With a hundred replies streaming at once, those hand-offs and ours after them
(the wire reader, the fold, the reply's live tap), once per event, were the largest share
of the CPU a streamed reply cost (bench/first_text.py's profile). Framing everything one
read brought in one synchronous pass (`reads`) lets `read_stream` join what the read
carried into a few events (`agent.models.contract.join_deltas`) and pass those on.

The framing rules stay httpx-sse's: `SSELineDecoder` (CR, LF and CRLF, a line or a CRLF
split across reads) and `SSEDecoder` (the WHATWG event-stream interpretation: fields,
comments, `id`, `retry`, dispatch at a blank line) are exactly what `aiter_sse` runs, read
from the module the library keeps them in. The module is private to httpx-sse, so
pyproject.toml holds httpx-sse below its next minor release, and
tests/agent/test_sse_streams.py checks that any split of a stream's bytes gives the same
answer.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import httpx
from httpx_sse import ServerSentEvent
from httpx_sse._decoders import SSEDecoder, SSELineDecoder


async def reads(response: httpx.Response) -> AsyncGenerator[list[ServerSentEvent], None]:
    """For each read of `response`'s text, the events it completed; then those the end of
    the body completes."""
    frames = SSEFrames()
    async for text in response.aiter_text():
        yield frames.feed(text)
    yield frames.flush()


def is_event_stream(response: httpx.Response) -> bool:
    """Whether `response` says it is an event stream, as httpx-sse's `EventSource` asks."""
    media = response.headers.get("content-type", "").partition(";")[0]
    return "text/event-stream" in media


class SSEFrames:
    """Text in, as it arrives; the events it completes out."""

    def __init__(self) -> None:
        self._lines = SSELineDecoder()
        self._events = SSEDecoder()

    def feed(self, text: str) -> list[ServerSentEvent]:
        """The events completed by `text`, in order."""
        return self._decode(self._lines.decode(text))

    def flush(self) -> list[ServerSentEvent]:
        """The events completed by the end of the stream (an unterminated last line)."""
        return self._decode(self._lines.flush())

    def _decode(self, lines: list[str]) -> list[ServerSentEvent]:
        events = []
        for line in lines:
            event = self._events.decode(line.rstrip("\n"))
            if event is not None:
                events.append(event)
        return events
