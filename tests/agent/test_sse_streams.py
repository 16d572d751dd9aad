"""Reading SSE streams through httpx and httpx-sse: any split of the bytes gives the same
answer, and a response that ends too early or is no event stream becomes the right error.

Each stream is an `httpx.Response` over an async byte stream of chunks — what httpx hands on
from a socket, one read per chunk — read by the real `read_stream` and wire-format readers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from agent.core.errors import ModelError, NonTransientModelError, Route, TransientModelError
from agent.models.contract import ModelRequest, ModelResponse, ToolCall, UserMessage
from agent.models.providers.anthropic_wire import EventReader
from agent.models.providers.http_model import StreamReader, fold, read_stream
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from agent.models.providers.openai_wire import ChunkReader
from tests.fakes.openai_api import JSONReply, OpenAIServer, RawReply

ROUTE = Route("openai", "m", 0)
SSE = {"content-type": "text/event-stream"}


Then = Literal["end", "cut", "hang"]


class Chunks(httpx.AsyncByteStream):
    """The body, one read per chunk; then the end, a dropped connection, or nothing more."""

    def __init__(self, chunks: Sequence[bytes], *, then: Then = "end") -> None:
        self._chunks = chunks
        self._then = then

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        if self._then == "cut":
            raise httpx.RemoteProtocolError("peer closed connection without sending complete body")
        if self._then == "hang":
            await asyncio.Event().wait()  # a server that keeps the connection open


def response(
    chunks: Sequence[bytes], headers: dict[str, str] | None = None, *, then: Then = "end"
) -> httpx.Response:
    return httpx.Response(
        200, headers=SSE if headers is None else headers, stream=Chunks(chunks, then=then)
    )


Outcome = ModelResponse | tuple[str, str, str]


async def outcome(reader: StreamReader, resp: httpx.Response) -> Outcome:
    """The folded answer, or the error's class, message and partial text."""
    try:
        return await fold(read_stream(reader, resp, ROUTE))
    except ModelError as exc:
        return (type(exc).__name__, str(exc), getattr(exc, "partial_text", ""))


def split(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted(min(c, len(raw)) for c in cuts)
    return [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]


# A stream to write in each wire format: text in pieces, maybe one tool call whose
# arguments come in pieces, and the framing a server may add around the events.


@dataclass(frozen=True)
class Script:
    text: list[str]
    arguments: list[str] | None  # a tool call's argument fragments, or no tool call
    newline: str
    keep_alives: list[bool]  # before each event: a `:` comment and a blank line
    ids: bool  # every event carries an `id:` line

    def encode(self, events: list[tuple[str | None, str]]) -> bytes:
        nl, out = self.newline, []
        for number, (name, data) in enumerate(events):
            if self.keep_alives[number % len(self.keep_alives)]:
                out.append(f": keep-alive{nl}{nl}")
            head = f"id: {number}{nl}" if self.ids else ""
            head += f"event: {name}{nl}" if name else ""
            out.append(f"{head}data: {data}{nl}{nl}")
        return "".join(out).encode()

    def expected(self, call_id: str) -> tuple[str, tuple[ToolCall, ...]]:
        if self.arguments is None:
            return "".join(self.text), ()
        return "".join(self.text), (ToolCall.from_raw(call_id, "f", "".join(self.arguments)),)


_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
scripts = st.builds(
    Script,
    text=st.lists(_text, max_size=6),
    arguments=st.none() | st.lists(_text, max_size=4),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    keep_alives=st.lists(st.booleans(), min_size=1, max_size=5),
    ids=st.booleans(),
)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)  # raw UTF-8, so splits land inside characters


def openai_stream(script: Script) -> bytes:
    def chunk(delta: dict[str, object], finish: str | None = None) -> str:
        return _json(
            {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        )

    events = [chunk({"content": piece}) for piece in script.text]
    if script.arguments is not None:
        head = {"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}
        events.append(chunk({"tool_calls": [head]}))
        events += [
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            for piece in script.arguments
        ]
    events.append(chunk({}, "tool_calls" if script.arguments is not None else "stop"))
    events.append(_json({"model": "m", "choices": [], "usage": {"prompt_tokens": 3}}))
    return script.encode([(None, data) for data in [*events, "[DONE]"]])


def anthropic_stream(script: Script) -> bytes:
    message = {"model": "m", "content": [], "usage": {"input_tokens": 3}}
    events: list[tuple[str, object]] = [
        ("message_start", {"type": "message_start", "message": message}),
        ("ping", {"type": "ping"}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    for piece in script.text:
        delta = {"type": "text_delta", "text": piece}
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    if script.arguments is not None:
        block = {"type": "tool_use", "id": "c", "name": "f", "input": {}}
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": 1, "content_block": block},
            )
        )
        for piece in script.arguments:
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": delta})
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 1}))
    reason = "tool_use" if script.arguments is not None else "end_turn"
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": reason}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return script.encode([(name, _json(data)) for name, data in events])


FORMATS = [
    pytest.param(openai_stream, lambda: ChunkReader("m"), id="openai"),
    pytest.param(anthropic_stream, lambda: EventReader("m"), id="anthropic"),
]
Encode = Callable[[Script], bytes]
MakeReader = Callable[[], StreamReader]


@pytest.mark.parametrize(("encode", "make_reader"), FORMATS)
@settings(deadline=None)  # one example reads its stream a byte at a time
@given(script=scripts, cuts=st.lists(st.integers(0, 4_000), max_size=12))
async def test_any_split_of_a_whole_stream_gives_the_answer_sent(
    encode: Encode, make_reader: MakeReader, script: Script, cuts: list[int]
) -> None:
    """However the bytes are cut into reads — inside a line, a CRLF or a UTF-8 character,
    one byte a read — the answer is the text and tool call that were sent."""
    raw = encode(script)
    whole = await outcome(make_reader(), response([raw]))
    assert isinstance(whole, ModelResponse)
    assert (whole.text, whole.tool_calls) == script.expected("c")
    assert await outcome(make_reader(), response(split(raw, cuts))) == whole
    assert await outcome(make_reader(), response([bytes([b]) for b in raw])) == whole


@pytest.mark.parametrize(("encode", "make_reader"), FORMATS)
@settings(deadline=None)
@given(
    script=scripts,
    end=st.integers(0, 4_000),
    then=st.sampled_from(["end", "cut"]),
    cuts=st.lists(st.integers(0, 4_000), max_size=12),
)
async def test_any_split_of_a_stream_that_stops_anywhere_gives_the_same_outcome(
    encode: Encode, make_reader: MakeReader, script: Script, end: int, then: Then, cuts: list[int]
) -> None:
    """A stream closed or dropped at any byte ends the same way (an answer, or one error
    with the same partial text) however its bytes were cut into reads."""
    raw = encode(script)[:end]
    whole = await outcome(make_reader(), response([raw], then=then))
    assert await outcome(make_reader(), response(split(raw, cuts), then=then)) == whole
    if not isinstance(whole, ModelResponse):
        assert whole[0] == "StreamInterrupted" and script.expected("c")[0].startswith(whole[2])


@settings(deadline=None)
@given(raw=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=6))
async def test_arbitrary_bytes_end_in_a_model_error_whatever_the_split(
    raw: bytes, cuts: list[int]
) -> None:
    """Untrusted bytes never raise anything but our errors, and splitting them changes nothing."""
    whole = await outcome(ChunkReader("m"), response([raw]))
    assert await outcome(ChunkReader("m"), response(split(raw, cuts))) == whole


# The framing httpx-sse leaves to us.


async def test_keep_alives_and_ids_produce_no_events() -> None:
    """Keep-alive comments are ignored, also after an `id:` (httpx-sse then dispatches an
    empty event at each blank line, which must not reach the reader as a malformed chunk)."""
    chunk = _json(
        {
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}],
        }
    )
    raw = f"id: 1\ndata: {chunk}\n\n: keep-alive\n\n: OPENROUTER PROCESSING\n\nevent: x\n\ndata: [DONE]\n\n"
    answer = await outcome(ChunkReader("m"), response([raw.encode()]))
    assert isinstance(answer, ModelResponse) and answer.text == "hi"


async def test_utf8_always_and_a_leading_byte_order_mark_is_dropped() -> None:
    """SSE is UTF-8 whatever charset the header names, and a BOM, even split, is no field."""
    chunk = _json(
        {
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": "héllo 🌍"}, "finish_reason": "stop"}],
        }
    )
    raw = b"\xef\xbb\xbf" + f"data: {chunk}\n\ndata: [DONE]\n\n".encode()
    headers = {"content-type": "text/event-stream; charset=iso-8859-1"}
    answer = await outcome(ChunkReader("m"), response([raw[:2], raw[2:]], headers))
    assert isinstance(answer, ModelResponse) and answer.text == "héllo 🌍"


@pytest.mark.parametrize(
    ("raw", "make_reader"),
    [
        pytest.param(
            b'data: {"model": "m", "choices": [{"delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n',
            lambda: ChunkReader("m"),
            id="openai-[DONE]",
        ),
        pytest.param(
            b'event: message_start\ndata: {"type": "message_start", "message": {"content": []}}\n\n'
            b'event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}\n\n'
            b'event: message_stop\ndata: {"type": "message_stop"}\n\n',
            lambda: EventReader("m"),
            id="anthropic-message_stop",
        ),
    ],
)
async def test_the_read_stops_at_the_last_event_though_the_server_stays(
    raw: bytes, make_reader: MakeReader
) -> None:
    """A server that keeps the connection open after `[DONE]` / `message_stop` is not waited for."""
    async with asyncio.timeout(5):
        answer = await outcome(make_reader(), response([raw], then="hang"))
    assert isinstance(answer, ModelResponse) and answer.finish_reason == "stop"


# A response that is not an event stream.


@pytest.mark.parametrize(
    ("headers", "shown"),
    [
        ({"content-type": "application/json"}, "content type application/json"),
        ({"content-type": "text/html; charset=utf-8"}, "content type text/html"),
        ({}, "no content type"),
        ({"content-type": "sk-live-123 <secret>"}, "an unrecognised content type"),
    ],
)
async def test_a_body_that_is_not_an_event_stream_is_malformed(
    headers: dict[str, str], shown: str
) -> None:
    """A 200 that is not `text/event-stream` (a gateway's JSON error, a server that ignored
    `stream`) is a malformed answer, not a cut stream to retry; only a well-shaped media
    type is quoted in the message."""
    body = json.dumps({"error": {"message": "upstream says no", "code": "server_error"}})
    with pytest.raises(NonTransientModelError) as caught:
        await fold(read_stream(ChunkReader("m"), response([body.encode()], headers), ROUTE))
    assert not isinstance(caught.value, TransientModelError)
    assert str(caught.value) == (
        f"{ROUTE} returned a malformed response ({shown}, not text/event-stream)"
    )


@pytest.mark.parametrize(
    "reply",
    [
        JSONReply({"error": {"message": "no", "type": "server_error"}}),
        RawReply('{"id": "x", "choices": []}', content_type="application/json"),
    ],
)
async def test_a_json_answer_to_a_streaming_request_is_malformed_end_to_end(
    reply: JSONReply | RawReply,
) -> None:
    """Over a real socket: the OpenAI model refuses a 200 JSON body when it asked to stream."""
    async with OpenAIServer() as server:
        server.script(reply)
        model = OpenAIModel(
            "m", provider=OpenAIProvider(base_url=server.url, api_key=SecretStr("k")), stream=True
        )
        try:
            with pytest.raises(
                NonTransientModelError, match="application/json, not text/event-stream"
            ):
                await model.request(ModelRequest((UserMessage("hi"),)))
        finally:
            await model.aclose()
