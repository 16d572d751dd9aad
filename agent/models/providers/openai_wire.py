"""Translation between our model types and OpenAI Chat Completions JSON.

Pure functions, no I/O: `build_body` turns a `ModelRequest` into the request body,
`parse_completion` reads a non-streaming answer, and `ChunkReader` turns streamed chunks
into `StreamEvent`s. Vendor JSON is validated with pydantic here, at the trust boundary.

OpenAI caches prompt prefixes by itself (1,024 tokens and longer); a request with a
`CacheHint` sends its key as `prompt_cache_key`, so the requests of one conversation are
routed to the same cache. What it read is `usage.prompt_tokens_details.cached_tokens`.

Pictures are `image_url` parts with data URLs; a person's PDFs are `file` parts
(`file_data` as a data URL, named as the prompt numbered them, `document N.pdf`: the file's own name
stays inside the turn). A tool message carries text only, so the pictures and PDFs a tool
returned follow the run of tool messages in one user message, each tool's after a note
naming its call (its PDFs as `file` parts named by the tool).
The end user's id is `user`; `parallel_tool_calls: false` when the route takes one call
per step; an `output_schema` is the `json_schema` response format, `strict` where OpenAI
takes the schema so (agent/models/schemas.py: closed, every property required). Tools'
schemas are closed (`ToolSpec`) but not marked `strict`: strict function calling refuses
optional properties, which our tools have, and not every OpenAI-compatible server knows
the flag.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

from httpx_sse import ServerSentEvent
from pydantic import BaseModel, ConfigDict, TypeAdapter

# pydantic reads TypedDicts from typing_extensions only, before Python 3.12.
from typing_extensions import TypedDict

from agent.core.documents import PDF, Document
from agent.core.images import Image
from agent.core.notes import RuntimeNote
from agent.models.contract import (
    AssistantMessage,
    Finish,
    FinishReason,
    MessageStart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NamedTool,
    StreamEvent,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolChoice,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from agent.models.providers.call_events import CallEvents
from agent.models.providers.classify import StreamFailed
from agent.models.schemas import openai_strict

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
    "error": "error",
}


# OpenAI's reasoning models (o1, o3, o4-mini, gpt-5…) refuse `max_tokens` with a 400 and
# take `max_completion_tokens`; every other OpenAI-compatible server (vLLM, Ollama, LiteLLM)
# and OpenAI's other models take `max_tokens`. The name decides, with or without a vendor
# prefix (OpenRouter's `openai/o3-mini`); provider_options can still name either one.
_REASONING_MODEL = re.compile(r"(?:^|/)(?:o\d|gpt-5)")


def output_limit_parameter(model: str) -> str:
    """The body field that bounds `model`'s output tokens."""
    return "max_completion_tokens" if _REASONING_MODEL.search(model) else "max_tokens"


def build_body(request: ModelRequest, model: str, *, stream: bool) -> dict[str, Any]:
    """The JSON body for `POST {base_url}/chat/completions`."""
    body: dict[str, Any] = {"model": model, "messages": build_messages(request.messages)}
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
        body["tool_choice"] = _tool_choice(request.tool_choice)
        if not request.parallel_tool_calls:
            body["parallel_tool_calls"] = False
    if request.max_output_tokens is not None and not (
        {"max_tokens", "max_completion_tokens"} & request.provider_options.keys()
    ):
        body[output_limit_parameter(model)] = request.max_output_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stop:
        body["stop"] = list(request.stop)
    if request.end_user:
        body["user"] = request.end_user
    if request.output_schema is not None:
        schema: dict[str, Any] = {"name": "answer", "schema": dict(request.output_schema)}
        if openai_strict(request.output_schema):
            schema["strict"] = True
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if request.cache is not None:
        body["prompt_cache_key"] = request.cache.key
    return body | dict(request.provider_options)


def build_messages(messages: tuple[ModelMessage, ...]) -> list[dict[str, Any]]:
    """The messages in order; documents numbered in request order; the pictures of a run
    of tool results in one user message after it."""
    out: list[dict[str, Any]] = []
    documents = 0
    pending: list[ToolResultMessage] = []  # tool results of the current run with pictures
    for message in messages:
        if pending and not isinstance(message, ToolResultMessage):
            out.append(_tool_pictures(pending))
            pending = []
        if isinstance(message, UserMessage):
            out.append(
                {"role": "user", "content": _user_content(message, documents)},
            )
            documents += len(message.documents)
        else:
            out.append(_message(message))
        if isinstance(message, ToolResultMessage) and (message.images or message.documents):
            pending.append(message)
    if pending:
        out.append(_tool_pictures(pending))
    return out


def _tool_pictures(results: list[ToolResultMessage]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for result in results:
        kinds = ["pictures"] * bool(result.images) + ["documents"] * bool(result.documents)
        said = f"The {' and '.join(kinds)} {result.name} returned (call {result.call_id}):"
        parts.append({"type": "text", "text": RuntimeNote("tool_pictures", said).rendered()})
        parts += [_image_part(i) for i in result.images]
        parts += [_tool_file_part(d) for d in result.documents]
    return {"role": "user", "content": parts}


def _tool_file_part(document: Document) -> dict[str, Any]:
    """A tool's PDF as a `file` part, named by the tool (`report document 1.pdf`)."""
    data = base64.b64encode(document.data).decode("ascii")
    file = {"filename": f"{document.name}.pdf", "file_data": f"data:{PDF};base64,{data}"}
    return {"type": "file", "file": file}


def _message(message: ModelMessage) -> dict[str, Any]:
    match message:
        case SystemMessage(text=text):
            return {"role": "system", "content": text}
        case UserMessage():
            return {"role": "user", "content": _user_content(message, 0)}
        case AssistantMessage(text=text, tool_calls=calls):
            return _assistant(text, calls)
        case ToolResultMessage(call_id=call_id, content=content, is_error=is_error):
            # Chat Completions has no error flag on tool results; say it in the content.
            text = f"Error: {content}" if is_error else content
            return {"role": "tool", "tool_call_id": call_id, "content": text}


def _user_content(message: UserMessage, documents_before: int) -> str | list[dict[str, Any]]:
    """Plain text, or the text then its pictures as `image_url` parts and its documents as
    `file` parts (data URLs: the provider never fetches anything of ours)."""
    if not message.images and not message.documents:
        return message.text
    files = [_file_part(d, documents_before + n) for n, d in enumerate(message.documents, 1)]
    pictures = [_image_part(i) for i in message.images]
    return [{"type": "text", "text": message.text}, *pictures, *files]


def _file_part(document: Document, number: int) -> dict[str, Any]:
    data = base64.b64encode(document.data).decode("ascii")
    file = {
        "filename": f"document {number}.pdf",
        "file_data": f"data:{document.media_type};base64,{data}",
    }
    return {"type": "file", "file": file}


def _image_part(image: Image) -> dict[str, Any]:
    data = base64.b64encode(image.data).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{image.media_type};base64,{data}"}}


def _assistant(text: str, calls: tuple[ToolCall, ...]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [_call(c) for c in calls]
    return message


def _call(call: ToolCall) -> dict[str, Any]:
    function = {"name": call.name, "arguments": call.raw_arguments}
    return {"id": call.id, "type": "function", "function": function}


def _tool(tool: ToolSpec) -> dict[str, Any]:
    function = {
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
    }
    return {"type": "function", "function": function}


def _tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    if isinstance(choice, NamedTool):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


def finish_reason(reason: str | None) -> FinishReason:
    """Normalise a vendor finish reason; anything unknown is `other`."""
    return _FINISH_REASONS.get(reason or "", "other")


# Vendor JSON, validated. Unknown fields are ignored; missing optional ones default.


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _PromptDetails(_Wire):
    cached_tokens: int | None = 0


class _CompletionDetails(_Wire):
    reasoning_tokens: int | None = 0


class _Usage(_Wire):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None

    def usage(self) -> Usage:
        cached = self.prompt_tokens_details.cached_tokens if self.prompt_tokens_details else 0
        reasoning = (
            self.completion_tokens_details.reasoning_tokens if self.completion_tokens_details else 0
        )
        return Usage(
            self.prompt_tokens or 0, self.completion_tokens or 0, cached or 0, reasoning or 0
        )


class _Function(_Wire):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(_Wire):
    index: int | None = None
    id: str | None = None
    function: _Function = _Function()


class _Message(_Wire):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(_Wire):
    message: _Message
    finish_reason: str | None = None


class _Completion(_Wire):
    model: str = ""
    choices: list[_Choice]
    usage: _Usage | None = None


def parse_completion(raw: bytes, model: str) -> ModelResponse:
    """Read a non-streaming answer; raises `ValueError` (pydantic's) when it is malformed."""
    completion = _Completion.model_validate_json(raw)
    if not completion.choices:
        raise ValueError("no choices")
    choice = completion.choices[0]
    message = choice.message
    calls = tuple(_tool_call(i, c) for i, c in enumerate(message.tool_calls or ()))
    reason = (
        "content_filter"
        if message.refusal and not message.content
        else finish_reason(choice.finish_reason)
    )
    usage = completion.usage.usage() if completion.usage else Usage()
    return ModelResponse(
        message.content or message.refusal or "", calls, reason, usage, completion.model or model
    )


def _tool_call(position: int, call: _ToolCall) -> ToolCall:
    call_id = call.id or f"call_{position}"
    return ToolCall.from_raw(call_id, call.function.name or "", call.function.arguments or "")


class _ErrorBody(_Wire):
    message: str | None = None
    type: str | None = None
    code: str | int | None = None


# A streamed chunk, validated into plain dicts: one arrives every few characters of an
# answer, and building a model object for each of its parts cost about as much as
# everything else done per chunk (bench/first_text.py's profile). Unknown keys are
# ignored, as by the models above; absent ones are absent.


class _FunctionDelta(TypedDict, total=False):
    name: str | None
    arguments: str | None


class _ToolCallDelta(TypedDict, total=False):
    index: int | None
    id: str | None
    function: _FunctionDelta


class _Delta(TypedDict, total=False):
    content: str | None
    tool_calls: list[_ToolCallDelta] | None


class _ChunkChoice(TypedDict, total=False):
    delta: _Delta
    finish_reason: str | None


class _Chunk(TypedDict, total=False):
    model: str | None
    choices: list[_ChunkChoice]
    usage: _Usage | None
    # OpenAI-compatible servers put an error object in the stream (OpenRouter, LiteLLM,
    # vLLM — whose `code` is the HTTP status); a bare string has been seen too.
    error: _ErrorBody | str | None


_CHUNK: TypeAdapter[_Chunk] = TypeAdapter(_Chunk)


def _failure(error: _ErrorBody | str) -> StreamFailed:
    """The `StreamFailed` for an error chunk: its code, then its type; an integer code is
    the HTTP status the server would have answered with."""
    if isinstance(error, str):
        return StreamFailed()
    names = [n for n in (error.code, error.type) if isinstance(n, str)]
    return StreamFailed(*names, status=error.code if isinstance(error.code, int) else None)


class ChunkReader:
    """Turns the `data:` payloads of a streamed completion into `StreamEvent`s.

    Tool-call fragments are keyed by their `index`, so calls whose fragments interleave are
    assembled correctly; `CallEvents` starts each call once its name is known and holds any
    argument fragments that came before it.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.text: list[str] = []
        self.finish: FinishReason | None = None
        self.usage = Usage()
        self.done = False
        self._started = False
        self._calls = CallEvents(lambda index: f"call_{index}")

    @property
    def finished(self) -> bool:
        """Whether the stream got far enough to be complete (`[DONE]`, or a finish reason)."""
        return self.done or self.finish is not None

    @property
    def partial_text(self) -> str:
        return "".join(self.text)

    def feed(self, event: ServerSentEvent) -> list[StreamEvent]:
        """Events for one chunk; `ValueError` if it is malformed, `StreamFailed` on an error."""
        if event.data.strip() == "[DONE]":
            self.done = True
            return []
        chunk = _CHUNK.validate_json(event.data)
        error = chunk.get("error")
        if error is not None:
            raise _failure(error)
        events: list[StreamEvent] = []
        if not self._started:
            self._started = True
            events.append(MessageStart(chunk.get("model") or self.model))
        usage = chunk.get("usage")
        if usage is not None:
            self.usage = usage.usage()
        for choice in chunk.get("choices", [])[:1]:
            self._choice(choice, events)
        return events

    def _choice(self, choice: _ChunkChoice, events: list[StreamEvent]) -> None:
        delta = choice.get("delta") or {}
        content = delta.get("content")
        if content:
            self.text.append(content)
            events.append(TextDelta(content))
        for position, call in enumerate(delta.get("tool_calls") or ()):
            index = call.get("index")
            function = call.get("function") or {}
            events.extend(
                self._calls.fragment(
                    position if index is None else index,
                    call_id=call.get("id"),
                    name=function.get("name"),
                    arguments=function.get("arguments") or "",
                )
            )
        reason = choice.get("finish_reason")
        if reason:
            self.finish = finish_reason(reason)

    def end(self) -> Iterator[StreamEvent]:
        """The closing events, once the stream finished properly."""
        yield from self._calls.finish()
        yield Finish(self.finish or "stop", self.usage)
