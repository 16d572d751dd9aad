"""A loopback Anthropic Messages server for tests.

Same machinery and scripting as `tests.fakes.openai_api` (read its docstring): record every
request, answer from a queue of replies or from `server.default`. The generic replies
(`JSONReply`, `RawReply`, `StreamReply`, `Hang`) are re-exported here::

    async with AnthropicServer() as server:          # server.url has no /v1: the model adds it
        server.script(reply_with_tool("final_reply", {"text": "hello"}))
        model = AnthropicModel(..., base_url=server.url)
        ...
        assert server.requests[0].headers["x-api-key"] == "sk-ant-test"

Anthropic-specific
    `Message(text, tool_calls, stop_reason, usage)`   an answer; JSON, or named SSE events
                                                      (`message_start` … `message_stop`, with a
                                                      `ping`) when the request said `stream`
    `reply_with_tool(name, args)`                     a `Message` with one `tool_use` block
    `error_reply(status, type, message)`              `{"type":"error","error":{…}}`
    `overloaded()`                                    the 529 `overloaded_error`
    `events(*(name, data))`                           encode named SSE events
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.openai_api import (
    FakeToolCall,
    Hang,
    JSONReply,
    LoopbackServer,
    RawReply,
    RecordedRequest,
    Reply,
    StreamReply,
)

__all__ = [
    "AnthropicServer",
    "FakeToolCall",
    "Hang",
    "JSONReply",
    "Message",
    "RawReply",
    "RecordedRequest",
    "StreamReply",
    "error_reply",
    "events",
    "overloaded",
    "reply_with_tool",
]

DEFAULT_USAGE = {"input_tokens": 10, "output_tokens": 5}


def events(*items: tuple[str, Mapping[str, Any] | str]) -> list[bytes]:
    """Encode `(event name, data)` pairs as SSE, dicts as JSON."""
    out = []
    for name, data in items:
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        out.append(f"event: {name}\ndata: {text}\n\n".encode())
    return out


def error_reply(
    status: int,
    type: str = "invalid_request_error",
    message: str = "error",
    headers: Mapping[str, str] | None = None,
) -> JSONReply:
    """Anthropic's error object."""
    body = {"type": "error", "error": {"type": type, "message": message}}
    return JSONReply(body, status=status, headers=headers or {})


def overloaded() -> JSONReply:
    """The 529 Anthropic sends when it is overloaded."""
    return error_reply(529, "overloaded_error", "Overloaded")


@dataclass(frozen=True)
class Message:
    """A Messages API answer, sent as JSON or as named SSE events as the request asks."""

    text: str | None = None
    tool_calls: Sequence[FakeToolCall] = ()
    stop_reason: str | None = None
    usage: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_USAGE))
    model: str = "claude-test"

    @property
    def reason(self) -> str:
        return self.stop_reason or ("tool_use" if self.tool_calls else "end_turn")

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        if seen.streaming:
            return await StreamReply(self.chunks()).send(request, seen)
        return await JSONReply(self.body()).send(request, seen)

    def _blocks(self) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": self.text}] if self.text else []
        return blocks + [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.raw_arguments)}
            for c in self.tool_calls
        ]

    def body(self) -> dict[str, Any]:
        """The non-streaming response body."""
        return {**self._envelope(), "content": self._blocks(), "stop_reason": self.reason}

    def _envelope(self) -> dict[str, Any]:
        envelope = {"id": "msg_fake", "type": "message", "role": "assistant", "model": self.model}
        return {**envelope, "stop_sequence": None, "usage": dict(self.usage)}

    def chunks(self) -> list[bytes]:
        """The streaming response as Anthropic sends it."""
        start = {**self._envelope(), "content": [], "stop_reason": None}
        start["usage"] = {**self.usage, "output_tokens": 1}
        items: list[tuple[str, Mapping[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start})
        ]
        items.append(("ping", {"type": "ping"}))
        for index, block in enumerate(self._blocks()):
            items += _block_events(index, block)
        delta = {"stop_reason": self.reason, "stop_sequence": None}
        usage = {"output_tokens": self.usage.get("output_tokens", 0)}
        items.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        items.append(("message_stop", {"type": "message_stop"}))
        return events(*items)


def _block_events(index: int, block: dict[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    if block["type"] == "text":
        head, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
    else:
        head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    return [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": head},
        ),
        ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def reply_with_tool(
    name: str, arguments: Mapping[str, Any], *, call_id: str = "toolu_1"
) -> Message:
    """An answer whose only content is one `tool_use` of `name` (e.g. `final_reply`)."""
    return Message(tool_calls=[FakeToolCall(name, arguments, call_id)])


class AnthropicServer(LoopbackServer):
    """The Anthropic fake; `url` is `http://127.0.0.1:PORT` (requests go to /v1/messages).

    Like the real API it refuses, with a 400, a conversation whose first message is not
    the user's, before any scripted reply is used.
    """

    async def __aenter__(self) -> AnthropicServer:
        await super().__aenter__()
        return self

    def _next_reply(self, seen: RecordedRequest) -> Reply:
        messages = seen.body.get("messages") if isinstance(seen.body, dict) else None
        if messages and messages[0].get("role") != "user":
            return error_reply(400, message='messages: first message must use the "user" role')
        return super()._next_reply(seen)
