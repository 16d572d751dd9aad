"""Mapping our request types to OpenAI Chat Completions JSON, and its answers back."""

from __future__ import annotations

import json

import pytest

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
from agent.models.providers.openai_wire import build_body, finish_reason, parse_completion

TOOL = ToolSpec("final_reply", "Send the reply.", {"type": "object", "properties": {}})


def test_messages_map_to_chat_roles() -> None:
    """System, user, assistant tool calls and tool results become chat messages in order."""
    call = ToolCall.from_raw("call_9", "lookup", '{"q": "x"}')
    request = ModelRequest(
        (
            SystemMessage("be brief"),
            UserMessage("hi"),
            AssistantMessage("", (call,)),
            ToolResultMessage("call_9", "lookup", "found"),
            ToolResultMessage("call_9", "lookup", "bad call", is_error=True),
        )
    )
    assert build_body(request, "m", stream=False)["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "found"},
        {"role": "tool", "tool_call_id": "call_9", "content": "Error: bad call"},
    ]


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", "auto"),
        ("required", "required"),
        ("none", "none"),
        (NamedTool("final_reply"), {"type": "function", "function": {"name": "final_reply"}}),
    ],
)
def test_tool_choice(choice: object, wire: object) -> None:
    """Every tool choice maps to its Chat Completions form, beside the function tools."""
    request = ModelRequest((UserMessage("x"),), tools=(TOOL,), tool_choice=choice)  # type: ignore[arg-type]
    body = build_body(request, "m", stream=False)
    assert body["tool_choice"] == wire
    assert body["tools"][0]["type"] == "function"
    assert body["tools"][0]["function"]["name"] == "final_reply"


def test_sampling_options_and_provider_options() -> None:
    """max_tokens, temperature and stop are sent; provider_options are merged last."""
    request = ModelRequest(
        (UserMessage("x"),),
        max_output_tokens=50,
        temperature=0.2,
        stop=("END",),
        provider_options={"seed": 7, "temperature": 0.3},
    )
    body = build_body(request, "m", stream=True)
    assert body["max_tokens"] == 50
    assert body["stop"] == ["END"]
    assert body["seed"] == 7 and body["temperature"] == 0.3
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert "tools" not in body and "tool_choice" not in body


def test_max_completion_tokens_in_options_replaces_max_tokens() -> None:
    """When provider_options set max_completion_tokens, max_tokens is not sent as well."""
    request = ModelRequest(
        (UserMessage("x"),), max_output_tokens=50, provider_options={"max_completion_tokens": 9}
    )
    body = build_body(request, "o3", stream=False)
    assert "max_tokens" not in body and body["max_completion_tokens"] == 9


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ("o1", "max_completion_tokens"),
        ("o3-mini", "max_completion_tokens"),
        ("o4-mini-2025-04-16", "max_completion_tokens"),
        ("gpt-5", "max_completion_tokens"),
        ("gpt-5-mini", "max_completion_tokens"),
        ("openai/o3-mini", "max_completion_tokens"),
        ("gpt-4.1-mini", "max_tokens"),
        ("gpt-4o", "max_tokens"),
        ("llama3.1:8b", "max_tokens"),
        ("qwen/qwen3-32b", "max_tokens"),
        ("mistral-large-2411", "max_tokens"),
    ],
)
def test_the_output_limit_uses_the_field_the_model_family_takes(model: str, field: str) -> None:
    """OpenAI's reasoning models get max_completion_tokens (they refuse max_tokens); every
    other model gets max_tokens, the field all OpenAI-compatible servers accept."""
    body = build_body(ModelRequest((UserMessage("x"),), max_output_tokens=64), model, stream=False)
    other = {"max_tokens", "max_completion_tokens"} - {field}
    assert body[field] == 64 and not other & body.keys()


@pytest.mark.parametrize(
    ("wire", "ours"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool_calls"),
        ("function_call", "tool_calls"),
        ("content_filter", "content_filter"),
        ("error", "error"),
        ("something_new", "other"),
        (None, "other"),
    ],
)
def test_finish_reasons_are_normalised(wire: str | None, ours: str) -> None:
    """Vendor finish reasons map onto our six; unknown ones become `other`."""
    assert finish_reason(wire) == ours


def test_usage_details_are_read() -> None:
    """Cached prompt tokens and reasoning tokens are read from the usage details."""
    body = {
        "model": "gpt-x",
        "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 64},
            "completion_tokens_details": {"reasoning_tokens": 12},
        },
    }
    response = parse_completion(json.dumps(body).encode(), "m")
    assert (response.text, response.model, response.finish_reason) == ("hi", "gpt-x", "stop")
    assert response.usage.cached_tokens == 64 and response.usage.reasoning_tokens == 12
    assert (response.usage.input_tokens, response.usage.output_tokens) == (100, 20)


def test_invalid_tool_arguments_are_kept_raw() -> None:
    """Arguments that are not a JSON object keep their raw text and parse to None."""
    message = {"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}]}
    body = {"choices": [{"message": message, "finish_reason": "tool_calls"}]}
    call = parse_completion(json.dumps(body).encode(), "m").tool_calls[0]
    assert (call.raw_arguments, call.arguments) == ("{oops", None)


@pytest.mark.parametrize("raw", [b"", b"[]", b"{}", b'{"choices": []}', b"<html>"])
def test_malformed_completions_raise_value_error(raw: bytes) -> None:
    """A body without a readable choice is malformed."""
    with pytest.raises(ValueError):
        parse_completion(raw, "m")
