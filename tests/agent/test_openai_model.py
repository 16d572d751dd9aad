"""The OpenAI provider end to end: a real httpx client against the loopback fake."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest
from pydantic import SecretStr

from agent.core.errors import (
    CredentialRejected,
    NonTransientModelError,
    StreamInterrupted,
    TransientModelError,
)
from agent.models.contract import ModelRequest, ToolCallDelta, ToolCallStart, ToolSpec, UserMessage
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from tests.fakes.openai_api import (
    Completion,
    KeepAliveForever,
    OpenAIServer,
    RawReply,
    StreamReply,
    error_reply,
    reply_with_tool,
    sse,
)

KEY = "sk-test-0123456789secret"
GATEWAY = "Bearer gw-0123456789secret"
REQUEST = ModelRequest(
    (UserMessage("hello"),),
    tools=(ToolSpec("final_reply", "Reply.", {"type": "object"}),),
    tool_choice="required",
)

MakeModel = Callable[..., OpenAIModel]


@pytest.fixture
async def server() -> AsyncIterator[OpenAIServer]:
    async with OpenAIServer() as server:
        yield server


@pytest.fixture
async def make_model(server: OpenAIServer) -> AsyncIterator[MakeModel]:
    models: list[OpenAIModel] = []

    def make(
        *,
        stream: bool = False,
        key: str | None = KEY,
        gateway: str | None = None,
        timeout: float = 60.0,
    ) -> OpenAIModel:
        provider = OpenAIProvider(
            base_url=server.url,
            api_key=SecretStr(key) if key else None,
            gateway_header="cf-aig-authorization",
            gateway_token=SecretStr(gateway) if gateway else None,
            timeout=timeout,
        )
        models.append(OpenAIModel("gpt-test", provider=provider, stream=stream))
        return models[-1]

    yield make
    for model in models:
        await model.aclose()


def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {"model": "gpt-test", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def call_part(index: int, arguments: str, **head: str) -> dict[str, object]:
    function = {"arguments": arguments, **({"name": head["name"]} if "name" in head else {})}
    part: dict[str, object] = {"index": index, "function": function}
    if "id" in head:
        part["id"] = head["id"]
    return chunk({"tool_calls": [part]})


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_call_answer(server: OpenAIServer, make_model: MakeModel, stream: bool) -> None:
    """A final_reply tool call comes back parsed, streaming or not, with the request mapped."""
    server.script(reply_with_tool("final_reply", {"text": "hi there"}))
    response = await make_model(stream=stream).request(REQUEST)
    assert response.tool_calls[0].name == "final_reply"
    assert response.tool_calls[0].arguments == {"text": "hi there"}
    assert response.finish_reason == "tool_calls" and response.usage.input_tokens == 10
    seen = server.requests[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.body["tool_choice"] == "required" and seen.body.get("stream", False) is stream


async def test_provider_key_and_gateway_token_are_sent(
    server: OpenAIServer, make_model: MakeModel
) -> None:
    """The provider key goes in Authorization and the gateway token in its own header."""
    server.script(Completion(text="ok"))
    await make_model(gateway=GATEWAY).request(REQUEST)
    headers = server.requests[0].headers
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["cf-aig-authorization"] == GATEWAY


async def test_no_key_sends_no_authorization(server: OpenAIServer, make_model: MakeModel) -> None:
    """A keyless local server (vLLM, Ollama) gets no Authorization header at all."""
    server.script(Completion(text="ok"))
    await make_model(key=None).request(REQUEST)
    assert "authorization" not in server.requests[0].headers
    assert "cf-aig-authorization" not in server.requests[0].headers


async def test_interleaved_tool_call_fragments_are_assembled_by_index(
    server: OpenAIServer, make_model: MakeModel
) -> None:
    """Argument fragments of two calls that interleave are joined per call index."""
    events = [
        call_part(0, "", id="call_a", name="lookup"),
        call_part(1, "", id="call_b", name="final_reply"),
        call_part(1, '{"text"'),
        call_part(0, '{"q": '),
        call_part(1, ': "done"}'),
        call_part(0, '"x"}'),
        chunk({}, "tool_calls"),
    ]
    server.script(StreamReply(sse(*events)))
    response = await make_model(stream=True).request(REQUEST)
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_a", "lookup", {"q": "x"}),
        ("call_b", "final_reply", {"text": "done"}),
    ]


async def test_stream_events_start_each_call_before_its_arguments(
    server: OpenAIServer, make_model: MakeModel
) -> None:
    """`stream` yields a start per call index before any argument fragment of it."""
    server.script(StreamReply(sse(call_part(0, '{"a"', id="c", name="f"), call_part(0, ": 1}"))))
    events = [e async for e in make_model().stream(REQUEST)]
    kinds = [e for e in events if isinstance(e, ToolCallStart | ToolCallDelta)]
    assert kinds == [ToolCallStart(0, "c", "f"), ToolCallDelta(0, '{"a"'), ToolCallDelta(0, ": 1}")]


async def test_sse_framing_split_lines_comments_and_several_events_per_write(
    server: OpenAIServer, make_model: MakeModel
) -> None:
    """Data lines split across writes, several events per write and keep-alives all decode."""
    raw = b"".join(sse(chunk({"content": "Hel"}), chunk({"content": "lo"}, "stop")))
    writes = [b": keep-alive\n\n", raw[:7], raw[7:40], raw[40:] + b": ping\n\n"]
    server.script(StreamReply(writes))
    response = await make_model(stream=True).request(REQUEST)
    assert (response.text, response.finish_reason) == ("Hello", "stop")


async def test_utf8_split_across_writes(server: OpenAIServer, make_model: MakeModel) -> None:
    """A multi-byte character split between two TCP writes arrives intact."""
    raw = b"".join(sse(chunk({"content": "naïve 🌍 ok"}, "stop")))
    cut = raw.index("🌍".encode()) + 1
    server.script(StreamReply([raw[:cut], raw[cut:]]))
    assert (await make_model(stream=True).request(REQUEST)).text == "naïve 🌍 ok"


async def test_cut_stream_keeps_partial_text_and_is_transient(
    server: OpenAIServer, make_model: MakeModel
) -> None:
    """A connection dropped mid-JSON raises a transient error carrying the text so far."""
    raw = b"".join(sse(chunk({"content": "partial "}), chunk({"content": "answer"}), done=False))
    server.script(StreamReply([raw, b'data: {"choices": [{"delta": {"cont'], cut=True))
    with pytest.raises(StreamInterrupted) as caught:
        await make_model(stream=True).request(REQUEST)
    assert caught.value.partial_text == "partial answer"
    assert isinstance(caught.value, TransientModelError)


async def test_stream_closed_cleanly_before_finish_is_cut(
    server: OpenAIServer, make_model: MakeModel
) -> None:
    """A stream that ends without a finish reason or [DONE] is treated as cut."""
    server.script(StreamReply(sse(chunk({"content": "half"}), done=False)))
    with pytest.raises(StreamInterrupted) as caught:
        await make_model(stream=True).request(REQUEST)
    assert caught.value.partial_text == "half"


async def test_error_object_mid_stream_is_transient(
    server: OpenAIServer, make_model: MakeModel
) -> None:
    """An error chunk inside the stream (OpenRouter, LiteLLM) raises a transient error."""
    error = {"error": {"message": "upstream overloaded", "code": "server_error"}}
    server.script(StreamReply(sse(chunk({"content": "so"}), error, done=False)))
    with pytest.raises(StreamInterrupted, match="server_error") as caught:
        await make_model(stream=True).request(REQUEST)
    assert caught.value.partial_text == "so"


async def test_malformed_chunk_is_non_transient(
    server: OpenAIServer, make_model: MakeModel
) -> None:
    """A complete data event that is not valid JSON is a malformed answer."""
    server.script(StreamReply(sse("{not json")))
    with pytest.raises(NonTransientModelError, match="malformed"):
        await make_model(stream=True).request(REQUEST)


async def test_malformed_body_is_non_transient(server: OpenAIServer, make_model: MakeModel) -> None:
    """A 200 whose body is not a completion is a malformed answer."""
    server.script(RawReply("<html>hello</html>", status=200))
    with pytest.raises(NonTransientModelError, match="malformed"):
        await make_model().request(REQUEST)


@pytest.mark.parametrize("stream", [False, True])
async def test_http_errors_are_classified(
    server: OpenAIServer, make_model: MakeModel, stream: bool
) -> None:
    """An error status is classified the same way for streaming and plain calls."""
    server.script(
        error_reply(401, "Incorrect API key provided: sk-test-01", code="invalid_api_key")
    )
    with pytest.raises(CredentialRejected) as caught:
        await make_model(stream=stream).request(REQUEST)
    assert caught.value.source == "provider" and caught.value.status_code == 401
    assert "OPENAI_API_KEY" in str(caught.value) and "sk-test" not in str(caught.value)


async def test_secrets_never_appear_in_reprs_or_errors(
    server: OpenAIServer, make_model: MakeModel
) -> None:
    """Neither the provider key nor the gateway token shows in reprs or error messages."""
    model = make_model(gateway=GATEWAY)
    server.script(error_reply(403, f"key {KEY} refused", type="permission_error"))
    with pytest.raises(CredentialRejected) as caught:
        await model.request(REQUEST)
    for text in (repr(model), repr(model.provider), str(caught.value), repr(caught.value)):
        assert "0123456789secret" not in text


async def test_usage_arrives_in_the_last_chunk(server: OpenAIServer, make_model: MakeModel) -> None:
    """With include_usage, the usage-only chunk after the finish is read."""
    usage = {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    server.script(Completion(text="ok", usage=usage))
    response = await make_model(stream=True).request(REQUEST)
    assert response.usage.cached_tokens == 4 and response.usage.reasoning_tokens == 2
    assert json.loads(server.requests[0].raw)["stream_options"] == {"include_usage": True}


async def test_the_deadline_bounds_the_whole_request(
    server: OpenAIServer, make_model: MakeModel
) -> None:
    """A stream that only ever sends keep-alive comments, so that no read ever times out,
    ends at the wall-clock deadline as a transient error."""
    server.script(KeepAliveForever(interval=0.05))
    model = make_model(stream=True, timeout=0.5)
    with pytest.raises(TransientModelError, match=r"no complete answer within 0.5 s"):
        await model.request(REQUEST)
