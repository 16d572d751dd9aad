"""Tool-call stream events: folded by index in any order, and emitted by both wire readers
as start, fragments, end per call — whatever order the server sent the pieces in."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from httpx_sse import ServerSentEvent
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from agent.core.errors import (
    CredentialRejected,
    ModelError,
    NonTransientModelError,
    QuotaExhausted,
    Route,
)
from agent.models.contract import (
    MessageStart,
    Model,
    ModelRequest,
    ModelResponse,
    StreamAccumulator,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UserMessage,
    join_deltas,
)
from agent.models.ladder import AttemptLadder, Outcome
from agent.models.providers.anthropic import AnthropicModel, AnthropicProvider
from agent.models.providers.anthropic_wire import EventReader
from agent.models.providers.http_model import read_stream
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from agent.models.providers.openai_wire import ChunkReader
from agent.rounds.live_reply import ReplyTap
from tests.agent.memory import MemoryDraft
from tests.agent.test_sse_streams import response
from tests.fakes.anthropic_api import AnthropicServer, events
from tests.fakes.anthropic_api import Message as AnthropicMessage
from tests.fakes.anthropic_api import reply_with_tool as anthropic_reply_with_tool
from tests.fakes.openai_api import (
    FakeToolCall,
    LoopbackServer,
    OpenAIServer,
    StreamReply,
    reply_with_tool,
    sse,
)

T = TypeVar("T")
REQUEST = ModelRequest((UserMessage("hello"),))
ROUTE = Route("openai", "m", 0)


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    fragments: tuple[str, ...]

    def expected(self) -> ToolCall:
        return ToolCall.from_raw(self.id, self.name, "".join(self.fragments))


def calls() -> st.SearchStrategy[list[Call]]:
    """Up to four calls with distinct ids, each with up to five argument fragments."""
    one = st.builds(
        Call,
        id=st.from_regex(r"call_[a-z0-9]{1,6}", fullmatch=True),
        name=st.sampled_from(["final_reply", "lookup", "search"]),
        fragments=st.lists(st.text(max_size=6), max_size=5).map(tuple),
    )
    return st.lists(one, min_size=1, max_size=4, unique_by=lambda c: c.id)


def interleave(data: st.DataObject, streams: Sequence[list[T]]) -> list[T]:
    """Any merge of `streams` that keeps each one's own order."""
    queues = [list(s) for s in streams if s]
    merged: list[T] = []
    while queues:
        queue = queues[data.draw(st.integers(0, len(queues) - 1))]
        merged.append(queue.pop(0))
        queues = [q for q in queues if q]
    return merged


def fold(events: Iterable[StreamEvent]) -> tuple[ToolCall, ...]:
    accumulator = StreamAccumulator()
    for event in events:
        accumulator.feed(event)
    return accumulator.result().tool_calls


def in_order(all_calls: Sequence[Call]) -> list[StreamEvent]:
    out: list[StreamEvent] = []
    for index, call in enumerate(all_calls):
        out.append(ToolCallStart(index, call.id, call.name))
        out += [ToolCallDelta(index, f) for f in call.fragments]
        out.append(ToolCallEnd(index))
    return out


@given(calls(), st.data())
def test_any_interleaving_folds_to_the_in_order_calls(
    all_calls: list[Call], data: st.DataObject
) -> None:
    """Fragments of several calls in any interleaving, each call's start anywhere among its
    own fragments (and maybe repeated later), fold to the calls of the in-order stream."""
    streams: list[list[StreamEvent]] = []
    for index, call in enumerate(all_calls):
        own: list[StreamEvent] = [ToolCallDelta(index, f) for f in call.fragments]
        start = ToolCallStart(index, call.id, call.name)
        own.insert(data.draw(st.integers(0, len(own))), start)
        if data.draw(st.booleans()):  # a server that repeats the head on a later fragment
            own.insert(data.draw(st.integers(own.index(start) + 1, len(own))), start)
        streams.append([*own, ToolCallEnd(index)])
    assert fold(interleave(data, streams)) == fold(in_order(all_calls))
    assert fold(in_order(all_calls)) == tuple(c.expected() for c in all_calls)


def stream_events() -> st.SearchStrategy[list[StreamEvent]]:
    """Any mix of text, tool-call events of a few calls, and the rest, in any order."""
    index = st.integers(0, 2)
    return st.lists(
        st.one_of(
            st.builds(TextDelta, st.text(max_size=5)),
            st.builds(ToolCallDelta, index, st.text(max_size=5)),
            st.builds(ToolCallStart, index, st.just("call"), st.sampled_from(["final_reply", "x"])),
            st.builds(ToolCallEnd, index),
            st.builds(MessageStart, st.just("m")),
        ),
        max_size=30,
    )


def joinable(a: StreamEvent, b: StreamEvent) -> bool:
    if isinstance(a, TextDelta) and isinstance(b, TextDelta):
        return True
    return isinstance(a, ToolCallDelta) and isinstance(b, ToolCallDelta) and a.index == b.index


@given(stream_events())
async def test_joined_deltas_fold_and_show_what_the_events_do(events: list[StreamEvent]) -> None:
    """Joining adjacent deltas changes neither the folded answer nor what a reply's live
    tap shows, and leaves no two adjacent events that could have been joined."""
    joined = join_deltas(events)

    def folded(stream: list[StreamEvent]) -> ModelResponse:
        accumulator = StreamAccumulator()
        for event in stream:
            accumulator.feed(event)
        return accumulator.result()

    async def shown(stream: list[StreamEvent]) -> str:
        draft = MemoryDraft()
        tap = ReplyTap(draft)
        for event in stream:
            await tap(event)
        return draft.visible

    assert folded(joined) == folded(events)
    assert await shown(joined) == await shown(events)
    assert not any(joinable(a, b) for a, b in itertools.pairwise(joined))
    assert [e for e in joined if not joinable(e, e)] == [e for e in events if not joinable(e, e)]


def test_only_deltas_join() -> None:
    """Two of any other event stay two, even one object twice; a call's arguments do not
    join another call's, nor text."""
    start = MessageStart("m")
    events: list[StreamEvent] = [start, start, ToolCallDelta(0, "a"), ToolCallDelta(1, "b")]
    events += [TextDelta("c"), TextDelta("d"), ToolCallDelta(1, "e")]
    assert join_deltas(events) == [
        start,
        start,
        ToolCallDelta(0, "a"),
        ToolCallDelta(1, "b"),
        TextDelta("cd"),
        ToolCallDelta(1, "e"),
    ]


async def test_what_one_read_brings_is_passed_on_joined() -> None:
    """A call's argument fragments in one read of the wire are one delta; a
    fragment in the next read is one more."""
    head = [{"index": 0, "id": "call_1", "function": {"name": "final_reply", "arguments": ""}}]
    pieces = [{"index": 0, "function": {"arguments": p}} for p in '{"text": "one two three"}']
    first = sse(
        *({"choices": [{"delta": {"tool_calls": [c]}}]} for c in head + pieces[:-1]), done=False
    )
    last = sse(
        {"choices": [{"delta": {"tool_calls": [pieces[-1]]}}]},
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
    )
    body = response([b"".join(first), b"".join(last)])  # two reads of the wire
    events = [e async for e in read_stream(ChunkReader("m"), body, ROUTE)]
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas == [ToolCallDelta(0, '{"text": "one two three"'), ToolCallDelta(0, "}")]


def test_a_late_start_names_fragments_that_came_before_it() -> None:
    """A start after its call's fragments still gives the call its id and name."""
    events: list[StreamEvent] = [ToolCallDelta(0, '{"text": ')]
    events += [ToolCallStart(0, "call_a", "final_reply")]
    events += [ToolCallDelta(0, '"hi"}'), ToolCallStart(0, "call_other", "lookup")]
    assert fold(events) == (ToolCall.from_raw("call_a", "final_reply", '{"text": "hi"}'),)


# The OpenAI reader: `id` and `function.name` may come on any fragment, be repeated, or (the
# id) never come at all; arguments may come before them. An id first sent *after* the name
# is not covered: the call has started by then, under its fallback id (no server known to
# us does that).


@dataclass(frozen=True)
class WireCall:
    call: Call
    name_at: int  # the fragment that first carries the name
    id_at: int | None  # the fragment that first carries the id (None: never sent)
    repeat: bool  # id and name are repeated on every fragment after their first one

    def parts(self, index: int) -> list[dict[str, object]]:
        parts = []
        for at, arguments in enumerate(self.call.fragments or ("",)):
            function: dict[str, object] = {"arguments": arguments}
            part: dict[str, object] = {"index": index, "function": function}
            if at == self.name_at or (self.repeat and at > self.name_at):
                function["name"] = self.call.name
            if self.id_at is not None and (at == self.id_at or (self.repeat and at > self.id_at)):
                part["id"] = self.call.id
            parts.append(part)
        return parts

    def expected(self, index: int) -> ToolCall:
        call_id = self.call.id if self.id_at is not None else f"call_{index}"
        return ToolCall.from_raw(call_id, self.call.name, "".join(self.call.fragments))


@st.composite
def wire_call(draw: st.DrawFn, call: Call) -> WireCall:
    last = max(len(call.fragments) - 1, 0)
    name_at = draw(st.integers(0, last))
    id_at = draw(st.none() | st.integers(0, name_at))
    return WireCall(call, name_at, id_at, draw(st.booleans()))


def chunk_event(part: dict[str, object]) -> ServerSentEvent:
    choice = {"index": 0, "delta": {"tool_calls": [part]}, "finish_reason": None}
    return ServerSentEvent(data=json.dumps({"model": "m", "choices": [choice]}))


def read_chunks(parts: Iterable[dict[str, object]]) -> list[StreamEvent]:
    reader = ChunkReader("m")
    out = [e for part in parts for e in reader.feed(chunk_event(part))]
    out += reader.feed(ServerSentEvent(data="[DONE]"))
    return out + list(reader.end())


def assert_start_deltas_end(events: Sequence[StreamEvent]) -> None:
    """Per index: exactly one start, first; exactly one end, last."""
    tool_events = [e for e in events if isinstance(e, ToolCallStart | ToolCallDelta | ToolCallEnd)]
    for index in {e.index for e in tool_events}:
        own = [e for e in tool_events if e.index == index]
        assert isinstance(own[0], ToolCallStart) and isinstance(own[-1], ToolCallEnd)
        assert sum(isinstance(e, ToolCallStart | ToolCallEnd) for e in own) == 2


@given(calls(), st.data())
def test_openai_reader_starts_each_call_before_its_arguments(
    all_calls: list[Call], data: st.DataObject
) -> None:
    """Whatever fragment carries a call's id and name, and in any interleaving, the reader
    emits one start (with the right id and name) before the call's arguments, and the
    stream folds to the calls sent."""
    wire = [data.draw(wire_call(call)) for call in all_calls]
    events = read_chunks(interleave(data, [w.parts(i) for i, w in enumerate(wire)]))
    assert_start_deltas_end(events)
    assert fold(events) == tuple(w.expected(i) for i, w in enumerate(wire))


def test_openai_reader_holds_arguments_sent_before_the_name() -> None:
    """Arguments before the call's name are released, joined, right after its start."""
    parts = [
        {"index": 0, "function": {"arguments": '{"te'}},
        {"index": 0, "function": {"arguments": 'xt": '}},
        {"index": 0, "id": "call_z", "function": {"name": "final_reply", "arguments": '"a"'}},
        {"index": 0, "id": "call_z", "function": {"arguments": "}"}},
    ]
    tool_events = [e for e in read_chunks(parts) if not hasattr(e, "model")][:-1]
    assert tool_events == [
        ToolCallStart(0, "call_z", "final_reply"),
        ToolCallDelta(0, '{"text": '),
        ToolCallDelta(0, '"a"'),
        ToolCallDelta(0, "}"),
        ToolCallEnd(0),
    ]


def anthropic_events(items: Iterable[dict[str, Any]]) -> list[StreamEvent]:
    reader = EventReader("m")
    start = {"type": "message_start", "message": {"model": "m", "content": []}}
    out: list[StreamEvent] = []
    for item in [start, *items, {"type": "message_stop"}]:
        out += reader.feed(ServerSentEvent(event=str(item["type"]), data=json.dumps(item)))
    return out + list(reader.end())


def block_start(index: int, call: Call) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
    return {"type": "content_block_start", "index": index, "content_block": block}


def json_delta(index: int, fragment: str) -> dict[str, Any]:
    delta = {"type": "input_json_delta", "partial_json": fragment}
    return {"type": "content_block_delta", "index": index, "delta": delta}


@given(calls(), st.data())
def test_anthropic_reader_starts_each_block_before_its_arguments(
    all_calls: list[Call], data: st.DataObject
) -> None:
    """`content_block_start` anywhere among its block's `input_json_delta`s (Anthropic sends
    it first; a proxy might not), interleaved with other blocks: one start per call before
    its arguments, one end after them, and the calls sent."""
    streams: list[list[dict[str, Any]]] = []
    for index, call in enumerate(all_calls):
        own = [json_delta(index, f) for f in call.fragments if f]
        own.insert(data.draw(st.integers(0, len(own))), block_start(index, call))
        streams.append([*own, {"type": "content_block_stop", "index": index}])
    events = anthropic_events(interleave(data, streams))
    assert_start_deltas_end(events)
    assert fold(events) == tuple(c.expected() for c in all_calls)


# End to end, through the real httpx client and the loopback fakes.


S = TypeVar("S", bound=LoopbackServer)
M = TypeVar("M", bound=Model)


@contextlib.asynccontextmanager
async def streaming(server: S, make: Callable[[str], M]) -> AsyncIterator[tuple[S, M]]:
    """A loopback fake and a streaming model of it, closed afterwards."""
    async with server:
        model = make(server.url)
        try:
            yield server, model
        finally:
            await model.aclose()


def openai(url: str) -> OpenAIModel:
    provider = OpenAIProvider(base_url=url, api_key=SecretStr("sk-test"))
    return OpenAIModel("gpt-test", provider=provider, stream=True)


def anthropic(url: str) -> AnthropicModel:
    provider = AnthropicProvider(base_url=url, api_key=SecretStr("sk-ant-test"))
    return AnthropicModel("claude-test", provider=provider, stream=True)


@pytest.fixture
async def openai_model() -> AsyncIterator[tuple[OpenAIServer, OpenAIModel]]:
    async with streaming(OpenAIServer(), openai) as pair:
        yield pair


@pytest.fixture
async def anthropic_model() -> AsyncIterator[tuple[AnthropicServer, AnthropicModel]]:
    async with streaming(AnthropicServer(), anthropic) as pair:
        yield pair


async def test_openai_stream_with_arguments_before_the_name(
    openai_model: tuple[OpenAIServer, OpenAIModel],
) -> None:
    """A server that sends a call's arguments before its id and name: `stream` starts the
    call (named) before any of its arguments, and `request` returns the whole call."""
    server, model = openai_model
    parts = [
        {"index": 0, "function": {"arguments": '{"text": "he'}},
        {"index": 0, "id": "call_9", "function": {"name": "final_reply", "arguments": 'llo"}'}},
    ]
    choices = [{"index": 0, "delta": {"tool_calls": [p]}, "finish_reason": None} for p in parts]
    finish = {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    body = sse(*[{"model": "m", "choices": [c]} for c in choices], finish)
    server.script(StreamReply(body), StreamReply(body))
    streamed = [e async for e in model.stream(REQUEST)]
    tool_events = [e for e in streamed if isinstance(e, ToolCallStart | ToolCallDelta)]
    assert tool_events[0] == ToolCallStart(0, "call_9", "final_reply")
    response = await model.request(REQUEST)
    assert response.tool_calls == (ToolCall.from_raw("call_9", "final_reply", '{"text": "hello"}'),)


async def test_anthropic_stream_with_a_delta_before_its_block_start(
    anthropic_model: tuple[AnthropicServer, AnthropicModel],
) -> None:
    """An `input_json_delta` before its `content_block_start` is held, not lost: the call
    keeps its id and name."""
    call = Call("toolu_7", "final_reply", ('{"text": ', '"hi"}'))
    start = {"type": "message_start", "message": {"model": "m", "content": []}}
    stop = {"type": "message_delta", "delta": {"stop_reason": "tool_use"}}
    items = [start, json_delta(0, call.fragments[0]), block_start(0, call)]
    items += [json_delta(0, call.fragments[1]), {"type": "content_block_stop", "index": 0}]
    items += [stop, {"type": "message_stop"}]
    server, model = anthropic_model
    server.script(StreamReply(events(*[(str(i["type"]), i) for i in items])))
    response = await model.request(REQUEST)
    assert response.tool_calls == (call.expected(),)


# A provider's error event inside a stream, through the real httpx client and the attempt
# ladder: transient ones are retried and only the retry's answer comes out; the others are
# classified as the same error sent as an HTTP answer.


class Recorder:
    """The ladder's sleep and observer, recording instead of waiting."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.outcomes: list[Outcome] = []

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)

    def observe(self, route: Route, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


async def climb(model: Model, recorder: Recorder) -> ModelResponse:
    ladder = AttemptLadder(
        [model], sleep=recorder.sleep, jitter=lambda: 0.0, on_attempt=recorder.observe
    )
    return (await ladder.run(lambda m: m.request(REQUEST))).value


SECRET = "sk-live-0123456789leak"


def openai_interrupted(error: object) -> StreamReply:
    """Text and half a `final_reply` call, then the error object, and no `[DONE]`."""
    head = {"index": 0, "id": "call_1", "function": {"name": "final_reply", "arguments": ""}}
    half = {"index": 0, "function": {"arguments": '{"text": "first tr'}}
    deltas = [{"content": "first try "}, {"tool_calls": [head]}, {"tool_calls": [half]}]
    chunks = [{"model": "m", "choices": [{"index": 0, "delta": d}]} for d in deltas]
    return StreamReply(sse(*chunks, {"error": error}, done=False))


SECOND = reply_with_tool("final_reply", {"text": "second answer"}, call_id="call_2")
SECOND_CALLS = (ToolCall.from_raw("call_2", "final_reply", '{"text": "second answer"}'),)


@pytest.mark.parametrize(
    "error",
    [
        {"message": f"upstream overloaded {SECRET}", "type": "server_error", "code": None},
        {"message": "Provider returned error", "code": 502},  # OpenRouter: code is the status
        {"message": "Rate limit", "type": "requests", "code": "rate_limit_exceeded"},
        {"message": "something we do not know", "type": "weird"},
        "a bare string",
    ],
)
async def test_openai_error_chunk_mid_stream_is_retried(
    openai_model: tuple[OpenAIServer, OpenAIModel], error: object
) -> None:
    """A transient (or unrecognised) error chunk after some text interrupts the stream; the
    ladder retries and the second attempt's answer is the result, nothing of the first."""
    server, model = openai_model
    server.script(openai_interrupted(error), SECOND)
    recorder = Recorder()
    response = await climb(model, recorder)
    assert (response.text, response.tool_calls) == ("", SECOND_CALLS)
    assert len(server.requests) == 2 and len(recorder.sleeps) == 1
    assert recorder.outcomes == ["transient", "ok"]


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"message": f"bad {SECRET}", "type": "invalid_request_error"}, NonTransientModelError),
        ({"message": "x", "type": "BadRequestError", "code": 400}, NonTransientModelError),
        (
            {"message": "x", "type": "invalid_request_error", "code": "context_length_exceeded"},
            NonTransientModelError,
        ),
        (
            {"message": "x", "type": "insufficient_quota", "code": "insufficient_quota"},
            QuotaExhausted,
        ),
        ({"message": f"key {SECRET}", "code": "invalid_api_key"}, CredentialRejected),
    ],
)
async def test_openai_error_chunk_mid_stream_is_classified_like_its_http_answer(
    openai_model: tuple[OpenAIServer, OpenAIModel], error: object, kind: type[ModelError]
) -> None:
    """An error chunk that would be a 400, 401 or quota refusal as an HTTP answer is that
    error mid-stream too: not retried, and its message names the stream, never the body."""
    server, model = openai_model
    server.script(openai_interrupted(error), SECOND)
    with pytest.raises(kind) as caught:
        await climb(model, Recorder())
    assert type(caught.value) is kind and len(server.requests) == 1
    assert "error event in the stream" in str(caught.value)
    assert SECRET not in str(caught.value) and "bad" not in str(caught.value)


def anthropic_interrupted(kind: str) -> StreamReply:
    """Text and half a `final_reply` block, then an `error` event."""
    first = AnthropicMessage(text="first try", tool_calls=[FakeToolCall("final_reply", {"a": 1})])
    head = first.chunks()[:6]  # message_start, ping, the text block, the tool block's start
    half = json_delta(1, '{"text": "first tr')
    error = {"type": "error", "error": {"type": kind, "message": f"oops {SECRET}"}}
    return StreamReply([*head, *events(("content_block_delta", half), ("error", error))])


@pytest.mark.parametrize("kind", ["overloaded_error", "api_error", "rate_limit_error", "new_one"])
async def test_anthropic_transient_error_event_mid_stream_is_retried(
    anthropic_model: tuple[AnthropicServer, AnthropicModel], kind: str
) -> None:
    """An `overloaded_error` (or `api_error`, or a type we do not know) mid-stream is an
    interrupted stream: retried, and only the retry's answer comes out."""
    server, model = anthropic_model
    server.script(
        anthropic_interrupted(kind),
        anthropic_reply_with_tool("final_reply", {"text": "second answer"}, call_id="call_2"),
    )
    recorder = Recorder()
    response = await climb(model, recorder)
    assert (response.text, response.tool_calls) == ("", SECOND_CALLS)
    assert len(server.requests) == 2 and recorder.outcomes == ["transient", "ok"]


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("invalid_request_error", NonTransientModelError),
        ("request_too_large", NonTransientModelError),
        ("billing_error", QuotaExhausted),
        ("authentication_error", CredentialRejected),
    ],
)
async def test_anthropic_error_event_mid_stream_is_classified_like_its_http_answer(
    anthropic_model: tuple[AnthropicServer, AnthropicModel],
    kind: str,
    error: type[ModelError],
) -> None:
    """An `invalid_request_error` mid-stream is not retried, as a 400 would not be."""
    server, model = anthropic_model
    server.script(anthropic_interrupted(kind))
    with pytest.raises(error) as caught:
        await climb(model, Recorder())
    assert type(caught.value) is error and len(server.requests) == 1
    assert kind in str(caught.value) and SECRET not in str(caught.value)
