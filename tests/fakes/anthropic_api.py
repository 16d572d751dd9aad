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
    `Message(text, citations=[page_citation(…)])`     a text block citing document pages
                                                      (`citations_delta`s when streamed)

Prompt caching: `server.cache = AnthropicCache()` (tests/fakes/prompt_cache.py) makes a
`Message` without a given `usage` report what the cache counted — `input_tokens`,
`cache_read_input_tokens`, `cache_creation_input_tokens` in `message_start` (and the whole
usage again in `message_delta`, as the API does), with its own output tokens.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.attachments import anthropic_refusal
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
from tests.fakes.prompt_cache import count_tokens

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
    "page_citation",
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
    # None: DEFAULT_USAGE, or what the server's cache counted and this reply's output.
    usage: Mapping[str, Any] | None = None
    model: str = "claude-test"
    # Citations of the text block (`page_location` objects, `page_citation`), sent as its
    # `citations` or, streamed, as `citations_delta`s before its text.
    citations: Sequence[Mapping[str, Any]] = ()

    @property
    def reason(self) -> str:
        return self.stop_reason or ("tool_use" if self.tool_calls else "end_turn")

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        usage = seen.report(self._usage(seen))
        if seen.streaming:
            return await StreamReply(self.chunks(usage)).send(request, seen)
        return await JSONReply(self.body(usage)).send(request, seen)

    def _usage(self, seen: RecordedRequest) -> Mapping[str, Any]:
        if self.usage is not None or seen.counted is None:
            return self.usage if self.usage is not None else DEFAULT_USAGE
        return {**seen.counted, "output_tokens": max(1, count_tokens(self._blocks()))}

    def _blocks(self) -> list[dict[str, Any]]:
        text: dict[str, Any] = {"type": "text", "text": self.text}
        if self.citations:
            text["citations"] = [dict(c) for c in self.citations]
        blocks: list[dict[str, Any]] = [text] if self.text else []
        return blocks + [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.raw_arguments)}
            for c in self.tool_calls
        ]

    def body(self, usage: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The non-streaming response body."""
        envelope = self._envelope(usage)
        return {**envelope, "content": self._blocks(), "stop_reason": self.reason}

    def _envelope(self, usage: Mapping[str, Any] | None) -> dict[str, Any]:
        envelope = {"id": "msg_fake", "type": "message", "role": "assistant", "model": self.model}
        sent = dict(usage or self.usage or DEFAULT_USAGE)
        return {**envelope, "stop_sequence": None, "usage": sent}

    def chunks(self, usage: Mapping[str, Any] | None = None) -> list[bytes]:
        """The streaming response as Anthropic sends it: the prompt's usage in
        `message_start`, the output's (cumulative, with the cache's counts when there are
        any) in `message_delta`."""
        start = {**self._envelope(usage), "content": [], "stop_reason": None}
        sent = start["usage"]
        start["usage"] = {**sent, "output_tokens": 1}
        items: list[tuple[str, Mapping[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start})
        ]
        items.append(("ping", {"type": "ping"}))
        for index, block in enumerate(self._blocks()):
            items += _block_events(index, block)
        delta = {"stop_reason": self.reason, "stop_sequence": None}
        cache_fields = ("cache_read_input_tokens", "cache_creation_input_tokens")
        final = {k: v for k, v in sent.items() if k == "output_tokens" or k in cache_fields}
        final.setdefault("output_tokens", 0)
        if any(k in sent for k in cache_fields):
            final["input_tokens"] = sent.get("input_tokens", 0)
        items.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": final}))
        items.append(("message_stop", {"type": "message_stop"}))
        return events(*items)


def _block_events(index: int, block: dict[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    deltas: list[dict[str, Any]]
    if block["type"] == "text":
        head: dict[str, Any] = {"type": "text", "text": ""}
        if "citations" in block:
            head["citations"] = []
        deltas = [{"type": "citations_delta", "citation": c} for c in block.get("citations", [])]
        deltas.append({"type": "text_delta", "text": block["text"]})
    else:
        head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
    start = {"type": "content_block_start", "index": index, "content_block": head}
    return [
        ("content_block_start", start),
        *(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def page_citation(
    cited_text: str,
    *,
    document_index: int = 0,
    title: str = "document 1",
    page: int = 1,
    last_page: int | None = None,
) -> dict[str, Any]:
    """A `page_location` citation of `page` (to `last_page`), as the API writes it (end
    page exclusive)."""
    return {
        "type": "page_location",
        "cited_text": cited_text,
        "document_index": document_index,
        "document_title": title,
        "start_page_number": page,
        "end_page_number": (last_page or page) + 1,
    }


def reply_with_tool(
    name: str, arguments: Mapping[str, Any], *, call_id: str = "toolu_1"
) -> Message:
    """An answer whose only content is one `tool_use` of `name` (e.g. `final_reply`)."""
    return Message(tool_calls=[FakeToolCall(name, arguments, call_id)])


class AnthropicServer(LoopbackServer):
    """The Anthropic fake; `url` is `http://127.0.0.1:PORT` (requests go to /v1/messages).

    Like the real API it refuses, with a 400, a conversation whose first message is not
    the user's, and a request carrying a picture or PDF that is not one, or any picture to
    a model in `no_vision` (tests/fakes/attachments.py), before any scripted reply is used.
    """

    def __init__(self, *, no_vision: Collection[str] = ()) -> None:
        super().__init__()
        self.no_vision = set(no_vision)

    async def __aenter__(self) -> AnthropicServer:
        await super().__aenter__()
        return self

    def _next_reply(self, seen: RecordedRequest) -> Reply:
        messages = seen.body.get("messages") if isinstance(seen.body, dict) else None
        if messages and messages[0].get("role") != "user":
            return error_reply(400, message='messages: first message must use the "user" role')
        refusal = anthropic_refusal(seen.body, self.no_vision)
        if refusal is not None:
            return error_reply(400, message=refusal)
        return super()._next_reply(seen)
