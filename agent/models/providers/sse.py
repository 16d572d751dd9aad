"""An incremental Server-Sent Events decoder.

Both wire formats stream over SSE, and bytes arrive in whatever pieces TCP delivers: a
`data:` line can be split anywhere, even inside a multi-byte UTF-8 character, and one read
can carry several events. `SSEDecoder` is fed raw bytes and returns complete events, per the
WHATWG `text/event-stream` rules (LF, CRLF or CR line ends, `:` comments, `event`/`data`/`id`
fields, an event dispatched on a blank line, an unterminated event at the end discarded).
It is small enough to property-test: any split of a byte stream yields the same events.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

# A CR at the very end of the buffer may be the first half of a CRLF: wait for more bytes.
_LINE_END = re.compile(r"\r\n|\r(?!\Z)|\n")


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None


class SSEDecoder:
    """Turns a byte stream into `ServerSentEvent`s, one `feed` at a time."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    @property
    def pending(self) -> bool:
        """True while bytes of an event not yet dispatched are held back."""
        return bool(self._buffer or self._data or self._event)

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Decode `chunk` and return the events it completed."""
        return self._decode(self._utf8.decode(chunk))

    def close(self) -> list[ServerSentEvent]:
        """End of stream: a trailing CR ends its line; an unterminated event is dropped."""
        text = self._utf8.decode(b"", final=True)
        tail = "\n" if (self._buffer + text).endswith("\r") else ""
        return self._decode(text + tail)

    def _decode(self, text: str) -> list[ServerSentEvent]:
        self._buffer += text
        if not self._started and self._buffer:
            self._buffer = self._buffer.removeprefix("\ufeff")
            self._started = True
        lines = _LINE_END.split(self._buffer)
        self._buffer = lines.pop()
        return [event for line in lines if (event := self._line(line)) is not None]

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        self._field(name, value.removeprefix(" "))
        return None

    def _field(self, name: str, value: str) -> None:
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value

    def _dispatch(self) -> ServerSentEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return ServerSentEvent(event or "message", "\n".join(data), self._id)


async def aiter_sse(chunks: AsyncIterable[bytes]) -> AsyncIterator[ServerSentEvent]:
    """Decode an async byte stream (e.g. `httpx.Response.aiter_bytes()`) into events."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.close():
        yield event
