"""A loopback OpenAI Chat Completions server for tests.

It speaks the wire format exactly (JSON and SSE), records every request, and answers from a
script, so the real provider code runs over a real socket against it::

    async with OpenAIServer() as server:
        server.script(reply_with_tool("final_reply", {"text": "hello"}))
        model = OpenAIModel(..., base_url=server.url)            # server.url ends in /v1
        ...
        assert server.requests[0].body["tool_choice"] == "required"
        assert server.requests[0].headers["authorization"] == "Bearer sk-test"

Prompt caching
    `server.cache = OpenAICache()` (tests/fakes/prompt_cache.py): a `Completion` that was
    not given a `usage` then reports the prompt as counted by the cache — prompt tokens,
    and the cached ones in `prompt_tokens_details` — and its own output tokens. Every usage
    the server sent is in `server.reported`, in order.

Scripting
    `server.script(*replies)` queues replies, answered in order, one per request. A reply is
    a `Reply` or a function `(RecordedRequest) -> Reply`. When the queue is empty the
    server calls `server.default` (settable; initially it answers 500 "nothing scripted").

Replies (all usable for both servers; the Anthropic fake has its own `Message`)
    `Completion(text, tool_calls, ...)`  an answer; rendered as JSON, or as SSE chunks when the
                                         request said `"stream": true`
    `reply_with_tool(name, args)`        a `Completion` carrying one tool call
    `JSONReply(body, status, headers)`   any JSON body with any status and headers
    `RawReply(body, status, headers)`    any bytes (HTML error pages, empty bodies, garbage)
    `StreamReply(chunks, cut=False)`     raw bytes, each chunk in its own TCP write; `cut=True`
                                         drops the connection after the last chunk
    `Hang()`                             never answers (for client timeouts); freed on exit
    `Gated(completion, release, before)` streams `before` events, then the rest once
                                         `release` is set (a model caught mid-answer)
    `error_reply(status, message, type, code)`  OpenAI's error object
    `sse(*events)`                       encode dicts as `data:` events ending in `[DONE]`

`RecordedRequest` has `method`, `path`, `headers` (lower-case keys), `body` (parsed JSON or
None), `raw` bytes, `at`, when it arrived (`time.monotonic`), and `counted`, the prompt's
usage as the server's cache counted it (None without one).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from tests.fakes.attachments import openai_refusal, parts
from tests.fakes.prompt_cache import count_tokens


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake server saw it."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    raw: bytes
    at: float = 0.0  # when it arrived (`time.monotonic`)
    counted: Mapping[str, Any] | None = None  # the prompt's usage, with a cache
    # The server's list of the usage it sent: a reply adds what it reports.
    reported: list[dict[str, Any]] | None = field(default=None, compare=False, repr=False)

    def report(self, usage: Mapping[str, Any]) -> dict[str, Any]:
        """`usage` as sent, noted in the server's `reported`."""
        sent = dict(usage)
        if self.reported is not None:
            self.reported.append(sent)
        return sent

    @property
    def streaming(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))

    def images(self) -> list[tuple[str, bytes]]:
        """The images the request carries, in order, as (media type, bytes): OpenAI's
        `image_url` data-URL parts and Anthropic's base64 `image` blocks alike (a tool
        result's too)."""
        return [
            (p.media_type, p.data) for p in parts(self.body) if p.media_type.startswith("image/")
        ]

    def documents(self) -> list[tuple[str, bytes]]:
        """The PDFs the request carries, in order, as (title or file name, bytes):
        Anthropic's `document` blocks and OpenAI's `file` parts alike."""
        return [(p.title, p.data) for p in parts(self.body) if p.media_type == "application/pdf"]


class Reply(Protocol):
    """Something the fake server can answer a request with."""

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse: ...


Script = Reply | Callable[[RecordedRequest], Reply]


@dataclass(frozen=True)
class JSONReply:
    """Answer with `body` as JSON."""

    body: Any
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        return web.json_response(self.body, status=self.status, headers=dict(self.headers))


@dataclass(frozen=True)
class RawReply:
    """Answer with exactly these bytes."""

    body: bytes | str = b""
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "text/html"

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        body = self.body.encode() if isinstance(self.body, str) else self.body
        headers = {"Content-Type": self.content_type, **self.headers}
        return web.Response(body=body, status=self.status, headers=headers)


@dataclass(frozen=True)
class StreamReply:
    """Stream raw chunks, one TCP write each; `cut` drops the connection instead of ending."""

    chunks: Sequence[bytes | str]
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    cut: bool = False

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        response = web.StreamResponse(status=self.status, headers=dict(self.headers))
        response.content_type = "text/event-stream"
        await response.prepare(request)
        for chunk in self.chunks:
            await response.write(chunk.encode() if isinstance(chunk, str) else chunk)
        if self.cut:
            _drop_connection(request)
            return response
        await response.write_eof()
        return response


@dataclass(frozen=True)
class Held:
    """Waits for `release` (set by the test) before sending `then`: a model that is busy
    exactly as long as the test wants, without sleeping."""

    release: asyncio.Event
    then: Reply

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        await self.release.wait()
        return await self.then.send(request, seen)


@dataclass(frozen=True)
class Gated:
    """A streamed `Completion` that sends its first `before` SSE events, waits for
    `release`, then sends the rest: a model caught half way through its answer (a
    non-streaming request waits for `release`, then gets the whole answer)."""

    completion: Completion
    release: asyncio.Event
    before: int

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        if not seen.streaming:
            await self.release.wait()
            return await self.completion.send(request, seen)
        response = web.StreamResponse(status=200)
        response.content_type = "text/event-stream"
        await response.prepare(request)
        for n, chunk in enumerate(self.completion.chunks()):
            if n == self.before:
                await self.release.wait()
            await response.write(chunk)
        await response.write_eof()
        return response


def _drop_connection(request: web.Request) -> None:
    """Close the socket mid-body, as a crashed upstream or a proxy timeout would."""
    transport = request.transport
    if transport is not None:
        transport.abort()


@dataclass(frozen=True)
class Hang:
    """Never answer; the server releases the handler when it shuts down."""

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        await request.app[_RELEASE].wait()
        return web.Response(status=503)


@dataclass(frozen=True)
class KeepAliveForever:
    """Start an event stream and send only keep-alive comments, every `interval` seconds,
    until the client goes away or the server shuts down (OpenRouter does this while a
    reasoning model thinks; a read timeout never fires)."""

    interval: float = 0.2

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.content_type = "text/event-stream"
        await response.prepare(request)
        release = request.app[_RELEASE]
        try:
            while not release.is_set():
                await response.write(b": OPENROUTER PROCESSING\n\n")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(release.wait(), self.interval)
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            pass  # the client gave up: what this reply is for
        return response


_RELEASE = web.AppKey("release", asyncio.Event)


def _nothing_scripted(seen: RecordedRequest) -> Reply:
    return JSONReply({"error": {"message": "fake server: nothing scripted"}}, status=500)


class PromptCounter(Protocol):
    """A vendor's prompt cache (tests/fakes/prompt_cache.py)."""

    def usage(self, body: Any) -> dict[str, Any]: ...


class LoopbackServer:
    """An aiohttp server on 127.0.0.1 with a random port that answers from a script."""

    prefix = ""

    def __init__(self) -> None:
        self.cache: PromptCounter | None = None
        self.reported: list[dict[str, Any]] = []
        self.requests: list[RecordedRequest] = []
        self.default: Callable[[RecordedRequest], Reply] = _nothing_scripted
        self._queue: deque[Script] = deque()
        self._runner: web.AppRunner | None = None
        self._arrived = asyncio.Condition()
        self.origin = ""

    @property
    def url(self) -> str:
        """The base URL a client is configured with."""
        return self.origin + self.prefix

    def script(self, *replies: Script) -> None:
        """Queue replies; each answers one request, in order."""
        self._queue.extend(replies)

    @property
    def pending(self) -> int:
        """How many scripted replies are still unused."""
        return len(self._queue)

    async def wait_until(
        self,
        predicate: Callable[[], bool],
        timeout: float = 30,  # noqa: ASYNC109 - a test's deadline, stated where it waits
        *,
        what: str = "condition",
    ) -> None:
        """Wait, re-checking as each request arrives, until `predicate()` holds (a condition
        on `requests`: another fake's waits re-check only on that fake's own calls)."""
        try:
            async with asyncio.timeout(timeout), self._arrived:
                await self._arrived.wait_for(predicate)
        except TimeoutError:
            raise AssertionError(
                f"{type(self).__name__}: timed out after {timeout}s waiting for {what};"
                f" {len(self.requests)} requests arrived"
            ) from None

    async def __aenter__(self) -> LoopbackServer:
        app = web.Application()
        app[_RELEASE] = asyncio.Event()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.origin = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            self._runner.app[_RELEASE].set()
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        seen = await _record(request)
        counted = (
            self.cache.usage(seen.body) if self.cache and isinstance(seen.body, dict) else None
        )
        seen = dataclasses.replace(seen, counted=counted, reported=self.reported)
        self.requests.append(seen)
        async with self._arrived:
            self._arrived.notify_all()
        return await self._next_reply(seen).send(request, seen)

    def _next_reply(self, seen: RecordedRequest) -> Reply:
        if not self._queue:
            return self.default(seen)
        item = self._queue.popleft()
        return item if hasattr(item, "send") else item(seen)  # type: ignore[operator]


async def _record(request: web.Request) -> RecordedRequest:
    raw = await request.read()
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    headers = {key.lower(): value for key, value in request.headers.items()}
    return RecordedRequest(request.method, request.path, headers, body, raw, time.monotonic())


# OpenAI-specific replies.


def sse(*events: Mapping[str, Any] | str, done: bool = True) -> list[bytes]:
    """Encode events as SSE `data:` lines (dicts as JSON), ending with `data: [DONE]`."""
    encoded = [e if isinstance(e, str) else json.dumps(e, ensure_ascii=False) for e in events]
    if done:
        encoded.append("[DONE]")
    return [f"data: {data}\n\n".encode() for data in encoded]


def error_reply(
    status: int,
    message: str = "error",
    type: str = "invalid_request_error",
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONReply:
    """OpenAI's error object: `{"error": {"message", "type", "param", "code"}}`."""
    body = {"error": {"message": message, "type": type, "param": None, "code": code}}
    return JSONReply(body, status=status, headers=headers or {})


@dataclass(frozen=True)
class FakeToolCall:
    name: str
    arguments: Mapping[str, Any] | str
    id: str = "call_1"

    @property
    def raw_arguments(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


DEFAULT_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


@dataclass(frozen=True)
class Completion:
    """A chat completion, sent as JSON or as SSE chunks as the request asks."""

    text: str | None = None
    tool_calls: Sequence[FakeToolCall] = ()
    finish_reason: str | None = None
    # None: DEFAULT_USAGE, or what the server's cache counted and this reply's output.
    usage: Mapping[str, Any] | None = None
    model: str = "gpt-test"

    @property
    def reason(self) -> str:
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        usage = seen.report(self._usage(seen))
        if seen.streaming:
            return await StreamReply(self.chunks(usage)).send(request, seen)
        return await JSONReply(self.body(usage)).send(request, seen)

    def _usage(self, seen: RecordedRequest) -> Mapping[str, Any]:
        if self.usage is not None or seen.counted is None:
            return self.usage if self.usage is not None else DEFAULT_USAGE
        output = max(
            1, count_tokens([self.text or "", *(c.raw_arguments for c in self.tool_calls)])
        )
        total = seen.counted["prompt_tokens"] + output
        return {**seen.counted, "completion_tokens": output, "total_tokens": total}

    def body(self, usage: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The non-streaming response body."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [_call_json(c) for c in self.tool_calls]
        choice = {"index": 0, "message": message, "finish_reason": self.reason}
        return {
            **_envelope(self.model, "chat.completion"),
            "choices": [choice],
            "usage": dict(usage or self.usage or DEFAULT_USAGE),
        }

    def chunks(self, usage: Mapping[str, Any] | None = None) -> list[bytes]:
        """The streaming response: role, text in pieces, tool calls in pieces, finish, usage."""
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": piece} for piece in _pieces(self.text or "")]
        for index, call in enumerate(self.tool_calls):
            deltas += _call_deltas(index, call)
        events = [_chunk(self.model, delta, None) for delta in deltas]
        events.append(_chunk(self.model, {}, self.reason))
        # The final chunk (the request asked `stream_options.include_usage`).
        sent = dict(usage or self.usage or DEFAULT_USAGE)
        events.append(
            {**_envelope(self.model, "chat.completion.chunk"), "choices": [], "usage": sent}
        )
        return sse(*events)


def reply_with_tool(
    name: str, arguments: Mapping[str, Any] | str, *, call_id: str = "call_1"
) -> Completion:
    """A completion whose only content is one call of tool `name` (e.g. `final_reply`)."""
    return Completion(tool_calls=[FakeToolCall(name, arguments, call_id)])


def _envelope(model: str, kind: str) -> dict[str, Any]:
    return {"id": "chatcmpl-fake", "object": kind, "created": 1700000000, "model": model}


def _chunk(model: str, delta: Mapping[str, Any], finish: str | None) -> dict[str, Any]:
    choice = {"index": 0, "delta": dict(delta), "finish_reason": finish}
    return {**_envelope(model, "chat.completion.chunk"), "choices": [choice]}


def _call_json(call: FakeToolCall) -> dict[str, Any]:
    function = {"name": call.name, "arguments": call.raw_arguments}
    return {"id": call.id, "type": "function", "function": function}


def _call_deltas(index: int, call: FakeToolCall) -> list[dict[str, Any]]:
    head = {
        "index": index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": ""},
    }
    tail = [{"index": index, "function": {"arguments": p}} for p in _pieces(call.raw_arguments)]
    return [{"tool_calls": [part]} for part in [head, *tail]]


def _pieces(text: str, size: int = 4) -> Iterable[str]:
    return (text[i : i + size] for i in range(0, len(text), size))


class OpenAIServer(LoopbackServer):
    """The OpenAI fake; `url` is `http://127.0.0.1:PORT/v1` (any path is accepted and recorded).

    Like the real API it refuses, with a 400, a request carrying a picture that is not one
    or a PDF that is not one, and any picture to a model in `no_vision`
    (tests/fakes/attachments.py), before any scripted reply is used."""

    prefix = "/v1"

    def __init__(self, *, no_vision: Collection[str] = ()) -> None:
        super().__init__()
        self.no_vision = set(no_vision)

    async def __aenter__(self) -> OpenAIServer:
        await super().__aenter__()
        return self

    def _next_reply(self, seen: RecordedRequest) -> Reply:
        refusal = openai_refusal(seen.body, self.no_vision)
        if refusal is not None:
            return JSONReply(refusal, status=400)
        return super()._next_reply(seen)
