"""What every HTTP-backed `Model` does the same way, whatever its wire format.

A wire format supplies four things — the path, the request body, a parser for a whole
answer and a reader for stream events — and `HTTPModel` does the rest: choosing streaming
or not, reading SSE, detecting a cut stream, bounding the whole request by a wall-clock
deadline (streams included: keep-alive comments do not extend it), and turning every
failure into one class of `agent.core.errors` (via `agent.models.providers.classify`). `read_stream` is that reading
on its own: a streaming `httpx.Response` in, `StreamEvent`s or one error out.

Before the wire format sees a request, the route's sampling settings fill what it left
unset and it is fitted to the model's capabilities (agent/models/capabilities.py). A 400
saying the model takes no pictures (or no documents) at all, though its route declared
them, is remembered for the life of this object and the request is sent again without
them; a 400 about one attachment is raised with the attachment it names placed
(`AttachmentRefused.attachment`), for the task's model to withhold and remember
(agent/models/task_model.py).
"""

from __future__ import annotations

import asyncio
import logging
from abc import abstractmethod
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import httpx
from httpx_sse import ServerSentEvent

from agent.core.errors import AttachmentRefused, Route
from agent.models.capabilities import Capabilities, fit_request
from agent.models.contract import (
    Model,
    ModelRequest,
    ModelResponse,
    StreamAccumulator,
    StreamEvent,
    Watch,
    events_of,
    join_deltas,
)
from agent.models.providers.attachment_paths import refused_attachment
from agent.models.providers.classify import (
    StreamFailed,
    cut_stream,
    malformed,
    not_an_event_stream,
    past_deadline,
    stream_failure,
)
from agent.models.providers.provider import Provider
from agent.models.providers.sse_frames import is_event_stream, reads
from agent.models.routes import NO_SAMPLING, Sampling

if TYPE_CHECKING:
    from agent.core.ports import Showing

log = logging.getLogger(__name__)


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

    def feed(self, event: ServerSentEvent) -> Iterable[StreamEvent]:
        """Events for one SSE event; `ValueError` if malformed, `StreamFailed` on an error."""

    def end(self) -> Iterator[StreamEvent]: ...


class HTTPModel(Model):
    """A model reached over HTTP through a `Provider`; `stream` decides how `request` calls it."""

    path: str

    def __init__(
        self,
        model: str,
        *,
        provider: Provider,
        slot: int = 0,
        stream: bool = False,
        capabilities: Capabilities | None = None,
        sampling: Sampling = NO_SAMPLING,
        credential: str = "",
    ) -> None:
        self.model = model
        self.name = f"{provider.name}:{model}"
        self.route = Route(provider.name, model, slot, credential)
        self.streaming = stream
        self.provider = provider
        self.capabilities = capabilities or Capabilities()
        self.sampling = sampling

    @abstractmethod
    def build_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]: ...

    @abstractmethod
    def parse(self, raw: bytes) -> ModelResponse:
        """Read a whole answer; raise `ValueError` when it is malformed."""

    @abstractmethod
    def reader(self) -> StreamReader: ...

    async def request(
        self,
        request: ModelRequest,
        *,
        watch: Watch | None = None,
        showing: Showing | None = None,
    ) -> ModelResponse:
        """The whole answer within the provider's deadline, streamed or not."""
        deadline = self.provider.deadline
        try:
            async with asyncio.timeout(deadline):
                return await self._fitted(self.sampling.applied(request), watch, showing)
        except TimeoutError as exc:
            raise past_deadline(self.route, deadline) from exc

    async def _fitted(
        self, request: ModelRequest, watch: Watch | None, showing: Showing | None
    ) -> ModelResponse:
        """The answer to `request` as the model takes it; sent once more when the model
        turns out to take no attachments of a kind its route declared."""
        fitted = fit_request(request, self.capabilities)
        try:
            return await self._request(fitted, watch, showing)
        except AttachmentRefused as exc:
            if exc.scope == "model" and self._unlearn(exc):
                return await self._request(fit_request(request, self.capabilities), watch, showing)
            exc.attachment = refused_attachment(
                self.build_body(fitted, stream=False), fitted, exc.path
            )
            raise

    def _unlearn(self, refused: AttachmentRefused) -> bool:
        """Take the kind `refused` says the model cannot take off its capabilities; False
        when it was off already (the 400 was about something else)."""
        field = "vision" if refused.kind == "picture" else "documents"
        if not getattr(self.capabilities, field):
            return False
        self.capabilities = replace(self.capabilities, **{field: False})
        log.warning(
            "%s takes no %ss though its route declares them: they are named, not sent, from "
            'now on; declare it in THREADGATE_ROUTES ("capabilities": {"%s": false})',
            self.name,
            refused.kind,
            field,
        )
        return True

    async def _request(
        self, request: ModelRequest, watch: Watch | None, showing: Showing | None
    ) -> ModelResponse:
        if self.streaming:
            return await fold(self.stream(request, showing=showing), self.model, watch)
        response = await self.provider.post(
            self.path, self.build_body(request, stream=False), self.route
        )
        try:
            answer = self.parse(response.content)
        except ValueError as exc:
            raise malformed(self.route, type(exc).__name__) from exc
        if watch is not None:
            for event in events_of(answer):
                await watch(event)
        return answer

    async def stream(
        self, request: ModelRequest, *, showing: Showing | None = None
    ) -> AsyncIterator[StreamEvent]:
        """The answer's events as they arrive; with `showing`, read less often once the
        draft shows (`Model.request`)."""
        body = self.build_body(request, stream=True)
        async with self.provider.stream(self.path, body, self.route, showing=showing) as response:
            async for event in read_stream(self.reader(), response, self.route):
                yield event

    async def aclose(self) -> None:
        await self.provider.aclose()

    def __repr__(self) -> str:
        kind = type(self).__name__
        return f"{kind}({self.name!r}, slot={self.route.slot}, provider={self.provider!r})"


async def read_stream(
    reader: StreamReader, response: httpx.Response, route: Route
) -> AsyncIterator[StreamEvent]:
    """The `StreamEvent`s of a 2xx streaming `response`, read by `reader`, until the reader
    is done (a server that keeps the connection open after its last event is not waited for).

    Everything one read of the body brought is framed and read at once, and its deltas are
    passed on joined (`reads`, `join_deltas`): the same answer in fewer, longer events.

    A cut connection, or a vendor error event that is transient (overloaded, a server
    error) or unrecognised, is a `StreamInterrupted` keeping the partial text; any other
    error event is classified as its HTTP answer would be (`stream_failure`); a response
    that is not an event stream, or an event the reader cannot read, is a malformed answer.
    The events read before a failure are passed on before it is raised.
    """
    # A server that answered without streaming (a gateway's JSON error sent with status
    # 200) will do so again: malformed, not a cut stream to retry.
    if not is_event_stream(response):
        raise not_an_event_stream(route, response.headers.get("content-type"))
    # SSE is always UTF-8, whatever charset the header names (WHATWG; browsers ignore it
    # too), and a leading byte-order mark is not part of the first field: `utf-8-sig`
    # decodes exactly that way, even when the mark is split across reads.
    response.encoding = "utf-8-sig"
    try:
        # aclosing: leaving early (done, or an error) closes the reads now, not whenever
        # the garbage collector gets to them.
        async with aclosing(reads(response)) as sse_reads:
            async for sse_events in sse_reads:
                events, failure = _read(reader, sse_events)
                for event in events:
                    yield event
                if failure is not None:
                    raise failure
                if reader.done:
                    break
    except httpx.HTTPError as exc:
        raise cut_stream(route, reader.partial_text, type(exc).__name__) from exc
    except StreamFailed as exc:
        raise stream_failure(route, reader.partial_text, exc) from exc
    except ValueError as exc:
        raise malformed(route, f"stream event: {type(exc).__name__}") from exc
    if not reader.finished:
        raise cut_stream(route, reader.partial_text, "closed before the finish")
    for event in reader.end():
        yield event


def _read(
    reader: StreamReader, events: list[ServerSentEvent]
) -> tuple[list[StreamEvent], StreamFailed | ValueError | None]:
    """What `reader` makes of `events`, joined, up to its end or the failure that stopped
    it (returned, for the caller to raise once it has passed on what came before)."""
    read: list[StreamEvent] = []
    failure: StreamFailed | ValueError | None = None
    for sse in events:
        # httpx-sse's decoder dispatches at a blank line even when no `data` came, e.g.
        # after every keep-alive comment once an `id` has been seen (the spec dispatches
        # nothing then). An event without data carries nothing either format reads.
        if not sse.data:
            continue
        try:
            read.extend(reader.feed(sse))
        except (StreamFailed, ValueError) as exc:
            failure = exc
            break
        if reader.done:
            break
    return join_deltas(read), failure


async def fold(
    events: AsyncIterator[StreamEvent], model: str = "", watch: Watch | None = None
) -> ModelResponse:
    """Fold a stream into the `ModelResponse` a non-streaming call would have returned,
    telling `watch` each event on the way."""
    accumulator = StreamAccumulator(model)
    async for event in events:
        accumulator.feed(event)
        if watch is not None:
            await watch(event)
    return accumulator.result()
