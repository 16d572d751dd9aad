"""Translation between our model types and Anthropic Messages JSON.

Pure functions, no I/O. Anthropic differs from Chat Completions in ways that matter here:
the system prompt is a top-level field, tool results are `tool_result` blocks inside a user
message (consecutive results share one message), `max_tokens` is required, and a stream is
a sequence of named events (`message_start`, `content_block_*`, `message_delta`, `ping`,
`error`, `message_stop`). Usage `input_tokens` here is the whole prompt: Anthropic's
uncached input plus cache reads and cache writes, so it compares with OpenAI's.

A request with a `CacheHint` marks cache breakpoints (`cache_control`, at most four):
after the tools, after the system prompt, after the conversation's stable prefix and
after the last message. Anthropic renders tools, then system, then messages, so the
first two cover what every request of a deployment shares; the last lets the next step
of a round (or the next message of the thread) read everything this one sent.

A person's PDFs go as `document` blocks (base64, after the turn's pictures), titled as the
prompt numbered them (`document N`) and with citations enabled (Anthropic wants them on all
documents or none); a text block citing one carries `page_location` citations (`cited_text`,
`document_index`, `start_page_number`, `end_page_number` exclusive), streamed as
`citations_delta`s, which the answer keeps (`ModelResponse.citations`). A tool's pictures
and PDFs go inside its `tool_result` (text, image and document blocks are what one holds),
its PDFs titled by the tool (`report document 1`), citations enabled like every
document of the request. `top_p` is sent only without `temperature`: the current
models refuse both at once. The end user's id goes in `metadata.user_id`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

from httpx_sse import ServerSentEvent
from pydantic import BaseModel, ConfigDict

from agent.core.documents import Document
from agent.core.images import Image
from agent.models.contract import (
    AssistantMessage,
    Finish,
    FinishReason,
    MessageStart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NamedTool,
    PageCitation,
    StreamEvent,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolChoice,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from agent.models.providers.call_events import CallEvents
from agent.models.providers.classify import StreamFailed

DEFAULT_MAX_TOKENS = 4096
# A breakpoint: the prefix up to and including the block that carries it is cached (for
# five minutes, refreshed by each read).
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "pause_turn": "other",
}


def build_body(request: ModelRequest, model: str, *, stream: bool) -> dict[str, Any]:
    """The JSON body for `POST {base_url}/v1/messages`."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": request.max_output_tokens or DEFAULT_MAX_TOKENS,
        "messages": build_messages(request.messages),
    }
    system = "\n\n".join(m.text for m in request.messages if isinstance(m, SystemMessage))
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
            for t in request.tools
        ]
        body["tool_choice"] = _tool_choice(request.tool_choice, request.parallel_tool_calls)
    if request.temperature is not None:
        body["temperature"] = request.temperature
    elif request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.end_user:
        body["metadata"] = {"user_id": request.end_user}
    if request.output_schema is not None:
        body["output_format"] = {"type": "json_schema", "schema": dict(request.output_schema)}
    if stream:
        body["stream"] = True
    if request.cache is not None:
        mark_breakpoints(body, request.messages, request.cache.stable)
    return body | dict(request.provider_options)


def mark_breakpoints(body: dict[str, Any], messages: tuple[ModelMessage, ...], stable: int) -> None:
    """Put `cache_control` on the last tool, the system prompt, the last block of the
    stable prefix's last message and the last block of the last message (module docstring)."""
    if body.get("tools"):
        body["tools"][-1] = body["tools"][-1] | {"cache_control": EPHEMERAL}
    if "system" in body:
        body["system"] = [{"type": "text", "text": body["system"], "cache_control": EPHEMERAL}]
    wire = body["messages"]
    ends = {len(build_messages(messages[:stable])) - 1, len(wire) - 1} if wire else set()
    for index in sorted(e for e in ends if e >= 0):
        wire[index] = _marked(wire[index])


def _marked(message: dict[str, Any]) -> dict[str, Any]:
    """The message with a breakpoint on its last content block (text becomes a block:
    Anthropic renders both forms alike, so the cached prefix is the same)."""
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    if not blocks:
        return message
    blocks[-1] = blocks[-1] | {"cache_control": EPHEMERAL}
    return message | {"content": blocks}


def build_messages(messages: tuple[ModelMessage, ...]) -> list[dict[str, Any]]:
    """User and assistant turns; consecutive tool results are merged into one user turn."""
    out: list[dict[str, Any]] = []
    documents = 0  # numbered in request order, as the model cites them
    for message in messages:
        if isinstance(message, ToolResultMessage) and out and _is_tool_results(out[-1]):
            out[-1]["content"].append(_tool_result(message))
        elif not isinstance(message, SystemMessage):
            out.append(_message(message, documents))
            if isinstance(message, UserMessage):
                documents += len(message.documents)
    return out


def _is_tool_results(message: dict[str, Any]) -> bool:
    content = message["content"]
    return isinstance(content, list) and bool(content) and content[0]["type"] == "tool_result"


def _message(
    message: UserMessage | AssistantMessage | ToolResultMessage, documents_before: int = 0
) -> dict[str, Any]:
    match message:
        case UserMessage(text=text, images=(), documents=()):
            return {"role": "user", "content": text}
        case UserMessage(text=text, images=images, documents=documents):
            # The words first, then the pictures and documents they came with, in one turn.
            text_block = [{"type": "text", "text": text}] if text else []
            docs = [_document(d, documents_before + n) for n, d in enumerate(documents, 1)]
            return {"role": "user", "content": text_block + [_image(i) for i in images] + docs}
        case AssistantMessage(text=text, tool_calls=calls):
            blocks = [{"type": "text", "text": text}] if text else []
            return {"role": "assistant", "content": blocks + [_tool_use(c) for c in calls]}
        case ToolResultMessage():
            return {"role": "user", "content": [_tool_result(message)]}


def _image(image: Image) -> dict[str, Any]:
    data = base64.b64encode(image.data).decode("ascii")
    source = {"type": "base64", "media_type": image.media_type, "data": data}
    return {"type": "image", "source": source}


def _document(document: Document, number: int = 0) -> dict[str, Any]:
    data = base64.b64encode(document.data).decode("ascii")
    return {
        "type": "document",
        "source": {"type": "base64", "media_type": document.media_type, "data": data},
        "title": document.label or (f"document {number}" if number else document.name),
        "citations": {"enabled": True},
    }


def _tool_use(call: ToolCall) -> dict[str, Any]:
    # Anthropic wants an object; arguments the model sent malformed are replayed as empty.
    arguments = dict(call.arguments) if call.arguments is not None else {}
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}


def _tool_result(result: ToolResultMessage) -> dict[str, Any]:
    content: str | list[dict[str, Any]] = result.content
    if result.images or result.documents:  # the tool's words, then its pictures and PDFs
        content = [{"type": "text", "text": result.content}]
        content += [_image(i) for i in result.images] + [_document(d) for d in result.documents]
    block = {"type": "tool_result", "tool_use_id": result.call_id, "content": content}
    return block | ({"is_error": True} if result.is_error else {})


def _tool_choice(choice: ToolChoice, parallel: bool = True) -> dict[str, Any]:
    if isinstance(choice, NamedTool):
        chosen: dict[str, Any] = {"type": "tool", "name": choice.name}
    else:
        chosen = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
    if not parallel and chosen["type"] != "none":
        chosen["disable_parallel_tool_use"] = True
    return chosen


def stop_reason(reason: str | None) -> FinishReason:
    """Normalise Anthropic's stop_reason; anything unknown is `other`."""
    return _STOP_REASONS.get(reason or "", "other")


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Usage(_Wire):
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    cache_read_input_tokens: int | None = 0
    cache_creation_input_tokens: int | None = 0

    def usage(self) -> Usage:
        cached = self.cache_read_input_tokens or 0
        written = self.cache_creation_input_tokens or 0
        prompt = (self.input_tokens or 0) + cached + written
        return Usage(
            input_tokens=prompt,
            output_tokens=self.output_tokens or 0,
            cached_tokens=cached,
            cache_write_tokens=written,
        )

    def updated(self, later: _Usage) -> _Usage:
        """These counts with those `later` carries (`message_delta`'s are cumulative, and
        name only what they update: the output tokens, and sometimes the input's)."""
        return self.model_copy(
            update={name: getattr(later, name) for name in later.model_fields_set}
        )


class _Citation(_Wire):
    type: str = ""
    cited_text: str = ""
    document_index: int = 0
    document_title: str | None = None
    start_page_number: int | None = None
    end_page_number: int | None = None

    def page(self) -> PageCitation | None:
        """A document page's citation; None for any other kind (a text document's
        characters, a search result): only PDFs are sent as documents."""
        if self.type != "page_location" or self.start_page_number is None:
            return None
        end = self.end_page_number or self.start_page_number + 1
        return PageCitation(
            self.document_index, self.cited_text, self.start_page_number, end, self.document_title
        )


def _pages(citations: list[_Citation] | None) -> tuple[PageCitation, ...]:
    return tuple(c for c in (raw.page() for raw in citations or ()) if c is not None)


class _Block(_Wire):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None
    citations: list[_Citation] | None = None


class _Message(_Wire):
    model: str = ""
    content: list[_Block]
    stop_reason: str | None = None
    usage: _Usage = _Usage()


def parse_message(raw: bytes, model: str) -> ModelResponse:
    """Read a non-streaming answer; raises `ValueError` when it is malformed."""
    message = _Message.model_validate_json(raw)
    text = "".join(b.text or "" for b in message.content if b.type == "text")
    calls = tuple(
        ToolCall.from_raw(b.id or f"toolu_{i}", b.name or "", json.dumps(b.input or {}))
        for i, b in enumerate(message.content)
        if b.type == "tool_use"
    )
    usage = message.usage.usage()
    citations = tuple(c for b in message.content if b.type == "text" for c in _pages(b.citations))
    return ModelResponse(
        text, calls, stop_reason(message.stop_reason), usage, message.model or model, citations
    )


class _Delta(_Wire):
    type: str = ""
    text: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None
    citation: _Citation | None = None


class _ErrorBody(_Wire):
    type: str = "error"


class _Event(_Wire):
    type: str
    index: int = 0
    message: _Message | None = None
    content_block: _Block | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: _ErrorBody | None = None


class EventReader:
    """Turns Anthropic's named stream events into `StreamEvent`s, keyed by block index."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.text: list[str] = []
        self.done = False
        self._reason: str | None = None
        self._usage = _Usage()
        self._calls = CallEvents(lambda index: f"toolu_{index}")
        self._citations: list[PageCitation] = []

    @property
    def finished(self) -> bool:
        return self.done

    @property
    def partial_text(self) -> str:
        return "".join(self.text)

    def feed(self, sse: ServerSentEvent) -> Iterator[StreamEvent]:
        """Events for one SSE event; `ValueError` if malformed, `StreamFailed` on `error`."""
        if sse.event == "ping":
            return
        event = _Event.model_validate_json(sse.data)
        if event.type == "error":
            raise StreamFailed(event.error.type if event.error else "error")
        yield from self._handle(event)

    def _handle(self, event: _Event) -> Iterator[StreamEvent]:
        match event.type:
            case "message_start" if event.message is not None:
                self._usage = event.message.usage
                yield MessageStart(event.message.model or self.model)
            case "content_block_start" if event.content_block is not None:
                yield from self._block(event.index, event.content_block)
            case "content_block_delta" if event.delta is not None:
                yield from self._delta(event.index, event.delta)
            case "content_block_stop":
                yield from self._calls.end(event.index)
            case "message_delta":
                self._reason = event.delta.stop_reason if event.delta else None
                if event.usage is not None:
                    self._usage = self._usage.updated(event.usage)
            case "message_stop":
                self.done = True

    def _block(self, index: int, block: _Block) -> Iterator[StreamEvent]:
        if block.type == "tool_use":
            yield from self._calls.start(index, block.id, block.name or "")
        elif block.type == "text" and block.text:
            self.text.append(block.text)
            yield TextDelta(block.text)

    def _delta(self, index: int, delta: _Delta) -> Iterator[StreamEvent]:
        if delta.type == "text_delta" and delta.text:
            self.text.append(delta.text)
            yield TextDelta(delta.text)
        elif delta.type == "input_json_delta" and delta.partial_json:
            yield from self._calls.fragment(index, arguments=delta.partial_json)
        elif delta.type == "citations_delta" and delta.citation is not None:
            self._citations.extend(_pages([delta.citation]))

    def end(self) -> Iterator[StreamEvent]:
        yield from self._calls.finish()
        yield Finish(stop_reason(self._reason), self._usage.usage(), tuple(self._citations))
