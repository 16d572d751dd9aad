"""The Anthropic provider: request mapping, and a real httpx client against the loopback fake."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from pydantic import SecretStr

from agent.core.errors import (
    CredentialRejected,
    NonTransientModelError,
    StreamInterrupted,
    TransientModelError,
)
from agent.models.contract import (
    AssistantMessage,
    ModelRequest,
    NamedTool,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from agent.models.providers.anthropic import AnthropicModel, AnthropicProvider
from agent.models.providers.anthropic_wire import build_body, stop_reason
from tests.fakes.anthropic_api import (
    AnthropicServer,
    Message,
    StreamReply,
    error_reply,
    events,
    overloaded,
    reply_with_tool,
)

KEY = "sk-ant-0123456789secret"
TOOL = ToolSpec("final_reply", "Reply.", {"type": "object"})
REQUEST = ModelRequest(
    (SystemMessage("be brief"), UserMessage("hello")), tools=(TOOL,), tool_choice="required"
)

MakeModel = Callable[..., AnthropicModel]


@pytest.fixture
async def server() -> AsyncIterator[AnthropicServer]:
    async with AnthropicServer() as server:
        yield server


@pytest.fixture
async def make_model(server: AnthropicServer) -> AsyncIterator[MakeModel]:
    models: list[AnthropicModel] = []

    def make(*, stream: bool = False, gateway: str | None = None) -> AnthropicModel:
        provider = AnthropicProvider(
            base_url=server.url,
            api_key=SecretStr(KEY),
            gateway_header="cf-aig-authorization",
            gateway_token=SecretStr(gateway) if gateway else None,
        )
        models.append(AnthropicModel("claude-test", provider=provider, stream=stream))
        return models[-1]

    yield make
    for model in models:
        await model.aclose()


def test_system_prompt_is_lifted_and_tool_results_are_merged() -> None:
    """System text goes top-level; consecutive tool results share one user message."""
    call_a = ToolCall.from_raw("toolu_a", "lookup", '{"q": 1}')
    call_b = ToolCall.from_raw("toolu_b", "lookup", '{"q": 2}')
    request = ModelRequest(
        (
            SystemMessage("rules"),
            UserMessage("hi"),
            AssistantMessage("checking", (call_a, call_b)),
            ToolResultMessage("toolu_a", "lookup", "one"),
            ToolResultMessage("toolu_b", "lookup", "bad", is_error=True),
            UserMessage("and?"),
        ),
        stop=("END",),
    )
    body = build_body(request, "claude", stream=False)
    assert body["system"] == "rules" and body["max_tokens"] == 4096
    assert body["stop_sequences"] == ["END"]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "user"]
    assert body["messages"][1]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_a",
        "name": "lookup",
        "input": {"q": 1},
    }
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "one"},
        {"type": "tool_result", "tool_use_id": "toolu_b", "content": "bad", "is_error": True},
    ]


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        (NamedTool("final_reply"), {"type": "tool", "name": "final_reply"}),
    ],
)
def test_tool_choice(choice: object, wire: object) -> None:
    """Every tool choice maps to Anthropic's form, tools carrying input_schema."""
    request = ModelRequest((UserMessage("x"),), tools=(TOOL,), tool_choice=choice)  # type: ignore[arg-type]
    body = build_body(request, "claude", stream=True)
    assert body["tool_choice"] == wire and body["stream"] is True
    assert body["tools"] == [
        {"name": "final_reply", "description": "Reply.", "input_schema": {"type": "object"}}
    ]


@pytest.mark.parametrize(
    ("wire", "ours"),
    [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("stop_sequence", "stop"),
        ("refusal", "content_filter"),
        ("brand_new", "other"),
    ],
)
def test_stop_reasons(wire: str, ours: str) -> None:
    """Anthropic stop reasons map onto ours."""
    assert stop_reason(wire) == ours


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_use_answer(
    server: AnthropicServer, make_model: MakeModel, stream: bool
) -> None:
    """A tool_use answer comes back as a tool call, streaming or not, with auth headers sent."""
    server.script(reply_with_tool("final_reply", {"text": "hi"}))
    response = await make_model(stream=stream, gateway="Bearer gw-token").request(REQUEST)
    assert response.tool_calls[0].arguments == {"text": "hi"}
    assert response.finish_reason == "tool_calls" and response.usage.output_tokens == 5
    seen = server.requests[0]
    assert seen.path == "/v1/messages" and seen.body["system"] == "be brief"
    assert seen.headers["x-api-key"] == KEY and seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.headers["cf-aig-authorization"] == "Bearer gw-token"


async def test_cache_reads_count_as_cached_input(
    server: AnthropicServer, make_model: MakeModel
) -> None:
    """cache_read_input_tokens is reported as cached and included in the input total."""
    usage = {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 100}
    server.script(Message(text="ok", usage=usage))
    response = await make_model().request(REQUEST)
    assert (response.usage.input_tokens, response.usage.cached_tokens) == (105, 100)


async def test_interleaved_stream_with_pings_and_split_utf8(
    server: AnthropicServer, make_model: MakeModel
) -> None:
    """Text and tool blocks stream by index; pings are skipped; split UTF-8 decodes."""
    start = {
        "type": "message_start",
        "message": {"model": "claude-x", "content": [], "usage": {"input_tokens": 3}},
    }
    tool = {"type": "tool_use", "id": "toolu_1", "name": "final_reply", "input": {}}
    raw = b"".join(
        events(
            ("message_start", start),
            ("ping", {"type": "ping"}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 1, "content_block": tool},
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "input_json_delta", "partial_json": '{"text": '},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "café ☕"},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "input_json_delta", "partial_json": '"ok"}'},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 1}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use"},
                    "usage": {"output_tokens": 9},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        )
    )
    cut = raw.index("☕".encode()) + 1
    server.script(StreamReply([raw[:cut], raw[cut:]]))
    response = await make_model(stream=True).request(REQUEST)
    assert response.text == "café ☕" and response.model == "claude-x"
    assert response.tool_calls[0].arguments == {"text": "ok"}
    assert (response.finish_reason, response.usage.output_tokens) == ("tool_calls", 9)


async def test_error_event_mid_stream_is_transient(
    server: AnthropicServer, make_model: MakeModel
) -> None:
    """An `error` event inside the stream raises a transient error keeping the text so far."""
    items = Message(text="partial").chunks()[:5]
    error = events(
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    )
    server.script(StreamReply([*items, *error]))
    with pytest.raises(StreamInterrupted, match="overloaded_error") as caught:
        await make_model(stream=True).request(REQUEST)
    assert caught.value.partial_text == "partial"


async def test_cut_stream_is_transient(server: AnthropicServer, make_model: MakeModel) -> None:
    """A connection dropped before message_stop is a transient, cut stream."""
    items = Message(text="so far").chunks()[:5]
    server.script(StreamReply([*items, b'event: content_block_delta\ndata: {"ty'], cut=True))
    with pytest.raises(StreamInterrupted) as caught:
        await make_model(stream=True).request(REQUEST)
    assert caught.value.partial_text == "so far"


async def test_overloaded_529_is_transient(server: AnthropicServer, make_model: MakeModel) -> None:
    """Anthropic's 529 overloaded_error is transient."""
    server.script(overloaded())
    with pytest.raises(TransientModelError) as caught:
        await make_model().request(REQUEST)
    assert caught.value.status_code == 529


@pytest.mark.parametrize("kind", ["authentication_error", "permission_error"])
async def test_credential_refusal_is_the_provider(
    server: AnthropicServer, make_model: MakeModel, kind: str
) -> None:
    """Anthropic's own 401/403 body names the provider and ANTHROPIC_API_KEY, without the key."""
    server.script(
        error_reply(401 if kind == "authentication_error" else 403, kind, f"bad key {KEY}")
    )
    model = make_model(gateway="Bearer 0123456789secret")
    with pytest.raises(CredentialRejected) as caught:
        await model.request(REQUEST)
    assert caught.value.source == "provider" and "ANTHROPIC_API_KEY" in str(caught.value)
    for text in (str(caught.value), repr(model), repr(model.provider)):
        assert "0123456789secret" not in text


async def test_malformed_message_is_non_transient(
    server: AnthropicServer, make_model: MakeModel
) -> None:
    """A 200 that is not a message is malformed."""
    server.script(error_reply(200, "weird"))
    with pytest.raises(NonTransientModelError, match="malformed"):
        await make_model().request(REQUEST)
