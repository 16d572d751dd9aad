"""What every HTTP-backed `Model` does the same way, whatever its wire format.

A wire format supplies four things — the path, the request body, a parser for a whole
answer and a reader for stream events — and `HTTPModel` does the rest: choosing streaming
or not, reading SSE, detecting a cut stream, and turning every failure into one class of
`agent.core.errors` (via `agent.models.providers.classify`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

import httpx

from agent.core.errors import Route
from agent.models.contract import Model, ModelRequest, ModelResponse, StreamAccumulator, StreamEvent
from agent.models.providers.classify import StreamFailed, cut_stream, malformed
from agent.models.providers.provider import Provider
from agent.models.providers.sse import ServerSentEvent, aiter_sse


class StreamReader(Protocol):
    """Turns one wire format's SSE events into `StreamEvent`s."""

    @property
    def done(self) -> bool:
        """The server said the stream is over; stop reading."""

    @property
    def finished(self) -> bool:
        """Enough arrived for a complete answer."""

    @property
    def partial_text(self) -> str: ...

    def feed(self, event: ServerSentEvent) -> Iterator[StreamEvent]: ...

    def end(self) -> Iterator[StreamEvent]: ...


class HTTPModel(Model):
    """A model reached over HTTP through a `Provider`; `stream` decides how `request` calls it."""

    path: str

    def __init__(
        self, model: str, *, provider: Provider, slot: int = 0, stream: bool = False
    ) -> None:
        self.model = model
        self.name = f"{provider.name}:{model}"
        self.route = Route(provider.name, model, slot)
        self.streaming = stream
        self.provider = provider

    @abstractmethod
    def build_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]: ...

    @abstractmethod
    def parse(self, raw: bytes) -> ModelResponse:
        """Read a whole answer; raise `ValueError` when it is malformed."""

    @abstractmethod
    def reader(self) -> StreamReader: ...

    async def request(self, request: ModelRequest) -> ModelResponse:
        if self.streaming:
            return await fold(self.stream(request), self.model)
        response = await self.provider.post(
            self.path, self.build_body(request, stream=False), self.route
        )
        try:
            return self.parse(response.content)
        except ValueError as exc:
            raise malformed(self.route, type(exc).__name__) from exc

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        body = self.build_body(request, stream=True)
        async with self.provider.stream(self.path, body, self.route) as response:
            reader = self.reader()
            async for event in self._read(reader, response):
                yield event

    async def _read(
        self, reader: StreamReader, response: httpx.Response
    ) -> AsyncIterator[StreamEvent]:
        try:
            async for sse in aiter_sse(response.aiter_bytes()):
                for event in reader.feed(sse):
                    yield event
                if reader.done:
                    break
        except httpx.HTTPError as exc:
            raise cut_stream(self.route, reader.partial_text, type(exc).__name__) from exc
        except StreamFailed as exc:
            raise cut_stream(self.route, reader.partial_text, f"error event: {exc.code}") from exc
        except ValueError as exc:
            raise malformed(self.route, f"stream event: {type(exc).__name__}") from exc
        if not reader.finished:
            raise cut_stream(self.route, reader.partial_text, "closed before the finish")
        for event in reader.end():
            yield event

    async def aclose(self) -> None:
        await self.provider.aclose()

    def __repr__(self) -> str:
        kind = type(self).__name__
        return f"{kind}({self.name!r}, slot={self.route.slot}, provider={self.provider!r})"


async def fold(events: AsyncIterator[StreamEvent], model: str = "") -> ModelResponse:
    """Fold a stream into the `ModelResponse` a non-streaming call would have returned."""
    accumulator = StreamAccumulator(model)
    async for event in events:
        accumulator.feed(event)
    return accumulator.result()
