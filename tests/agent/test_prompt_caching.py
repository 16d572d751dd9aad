"""Prompt caching: what the wire formats mark, and a prefix that stays byte for byte.

The responder's real requests go over the real Anthropic and OpenAI models to the fakes;
what is checked is what the provider would see: the breakpoints and key on the wire, and
that a conversation's next request (the next step of a round, the thread's next message)
repeats the previous one's prompt exactly up to its last breakpoint, so the provider's
cache can serve it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr

from agent.core.delegation import RoundInput
from agent.core.ports import StoredMessage, Task
from agent.durable.responder import ModelResponder, ResponderSettings
from agent.models.contract import (
    AssistantMessage,
    CacheHint,
    ModelRequest,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from agent.models.ladder import AttemptLadder
from agent.models.providers import anthropic_wire, openai_wire
from agent.models.providers.anthropic import AnthropicModel, AnthropicProvider
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from agent.rounds.caching import cache_key
from agent.rounds.subagent import builtin_subtask_types
from agent.rounds.tools import builtin_tools
from tests.fakes.anthropic_api import AnthropicServer, FakeToolCall, Message
from tests.fakes.openai_api import Completion, OpenAIServer, RecordedRequest
from tests.fakes.prompt_cache import AnthropicCache, OpenAICache, anthropic_blocks, canonical

TASK = Task("T1:C1:1.0", "T1:C1:1.0", {"team": "T1", "channel": "C1"})
TOOL = ToolSpec("lookup", "Looks things up.", {"type": "object", "properties": {}})
NOON = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
REQUEST = ModelRequest(
    (
        SystemMessage("be brief"),
        UserMessage("first"),
        AssistantMessage("answer"),
        UserMessage("second"),
        AssistantMessage("", (ToolCall.from_raw("c1", "lookup", "{}"),)),
        ToolResultMessage("c1", "lookup", "found"),
    ),
    tools=(TOOL,),
    cache=CacheHint("k", stable=4),
)


def _marked(body: dict[str, Any]) -> list[str]:
    """Where the body's breakpoints are, as the fakes' cache sees the prompt."""
    return [json.dumps(b, sort_keys=True) for b, marked in anthropic_blocks(body) if marked]


def test_anthropic_marks_tools_system_stable_prefix_and_last_message() -> None:
    """Four breakpoints: the last tool, the system prompt, the stable prefix's last
    message (the person's turn) and the request's last message."""
    body = anthropic_wire.build_body(REQUEST, "claude-test", stream=False)
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["system"] == [
        {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}
    ]
    marked = [i for i, m in enumerate(body["messages"]) if "cache_control" in m["content"][-1]]
    assert marked == [2, 4]  # "second", then the tool result
    assert len(_marked(body)) == 4


def test_without_a_hint_nothing_is_marked_or_keyed() -> None:
    """Caching off: the bodies are what they were before it."""
    plain = ModelRequest(REQUEST.messages, tools=REQUEST.tools)
    anthropic = anthropic_wire.build_body(plain, "claude-test", stream=False)
    assert "cache_control" not in json.dumps(anthropic) and anthropic["system"] == "be brief"
    assert "prompt_cache_key" not in openai_wire.build_body(plain, "gpt-test", stream=False)


def test_openai_sends_the_conversation_key() -> None:
    body = openai_wire.build_body(REQUEST, "gpt-test", stream=True)
    assert body["prompt_cache_key"] == "k"


def test_the_key_names_the_conversation_without_its_slack_ids() -> None:
    """Stable for one session, different for another, and no id in it."""
    assert cache_key(TASK.session_id) == cache_key(TASK.session_id)
    assert cache_key(TASK.session_id) != cache_key("T1:C1:2.0")
    assert "C1" not in cache_key(TASK.session_id) and len(cache_key("x")) == 32


@pytest.fixture
async def anthropic() -> AsyncIterator[tuple[AnthropicServer, AnthropicModel]]:
    async with AnthropicServer() as server:
        provider = AnthropicProvider(base_url=server.url, api_key=SecretStr("sk-ant"))
        model = AnthropicModel("claude-test", provider=provider)
        server.cache = AnthropicCache(minimum=1024)
        yield server, model
        await model.aclose()


def responder(model: AnthropicModel | OpenAIModel) -> ModelResponder:
    return ModelResponder(
        AttemptLadder([model]),
        tools=builtin_tools(),
        subtasks=builtin_subtask_types(),
        clock=lambda: NOON,
    )


def turn(n: int) -> StoredMessage:
    return StoredMessage(f"u{n}", TASK.session_id, "user", "turn", f"<turn>question {n}</turn>")


def reply(n: int) -> StoredMessage:
    return StoredMessage(f"r{n}", TASK.session_id, "assistant", "reply", f"answer {n}")


def prefix_to_breakpoint(body: dict[str, Any], back: int = 1) -> bytes:
    """The prompt up to and including its last breakpoint (`back`: the one so many from
    the end), as the provider reads it."""
    blocks = anthropic_blocks(body)
    point = [i for i, (_, marked) in enumerate(blocks) if marked][-back]
    return b"".join(canonical(b) for b, _ in blocks[: point + 1])


def whole_prompt(body: dict[str, Any]) -> bytes:
    return b"".join(canonical(b) for b, _ in anthropic_blocks(body))


async def test_each_request_repeats_the_last_ones_prefix_up_to_its_last_breakpoint(
    anthropic: tuple[AnthropicServer, AnthropicModel],
) -> None:
    """A round's step after a tool call repeats the step before, byte for byte, up to its
    last breakpoint; the thread's next message repeats the round's requests up to the
    conversation's stable prefix (the person's turn: the first step's last breakpoint,
    the second step's stable one); from the second request on the fake's cache serves
    most of the prompt."""
    server, model = anthropic
    server.script(
        Message(tool_calls=[FakeToolCall("current_time", {}, "t1")]),
        Message(tool_calls=[FakeToolCall("final_reply", {"text": "answer 1"}, "f1")]),
        Message(tool_calls=[FakeToolCall("final_reply", {"text": "answer 2"}, "f2")]),
    )
    ask = responder(model)
    await ask(RoundInput(TASK, [turn(1)]))
    await ask(RoundInput(TASK, [turn(1), reply(1), turn(2)]))
    first, step, following = (r.body for r in server.requests)
    assert whole_prompt(step).startswith(prefix_to_breakpoint(first))
    assert prefix_to_breakpoint(step, back=2) == prefix_to_breakpoint(first)
    assert whole_prompt(following).startswith(prefix_to_breakpoint(step, back=2))
    for usage in server.reported[1:]:
        read, prompt = usage["cache_read_input_tokens"], usage["input_tokens"]
        assert read / (read + prompt + usage["cache_creation_input_tokens"]) > 0.7


async def test_openai_requests_of_one_conversation_share_a_key_and_a_cached_prefix() -> None:
    """Every request of the session carries its key; the second reads the first's prefix."""
    async with OpenAIServer() as server:
        server.cache = OpenAICache()
        provider = OpenAIProvider(base_url=server.url, api_key=SecretStr("sk-test"))
        model = OpenAIModel("gpt-test", provider=provider)
        server.script(
            Completion(tool_calls=[FakeToolCall("final_reply", {"text": "answer 1"}, "f1")]),
            Completion(tool_calls=[FakeToolCall("final_reply", {"text": "answer 2"}, "f2")]),
        )
        ask = responder(model)
        await ask(RoundInput(TASK, [turn(1)]))
        await ask(RoundInput(TASK, [turn(1), reply(1), turn(2)]))
        await model.aclose()
    keys = {r.body["prompt_cache_key"] for r in server.requests}
    assert keys == {cache_key(TASK.session_id)}
    assert _cached(server.requests[1]) >= 1024


def _cached(seen: RecordedRequest) -> int:
    assert seen.counted is not None
    return int(seen.counted["prompt_tokens_details"]["cached_tokens"])


async def test_caching_off_sends_neither_breakpoints_nor_key(
    anthropic: tuple[AnthropicServer, AnthropicModel],
) -> None:
    """`prompt_caching=False` (THREADGATE_PROMPT_CACHING): the provider caches nothing."""
    server, model = anthropic
    server.script(Message(tool_calls=[FakeToolCall("final_reply", {"text": "a"}, "f1")]))
    off = ModelResponder(AttemptLadder([model]), settings=ResponderSettings(prompt_caching=False))
    await off(RoundInput(TASK, [turn(1)]))
    assert "cache_control" not in json.dumps(server.requests[0].body)
    assert server.reported[0]["cache_creation_input_tokens"] == 0
