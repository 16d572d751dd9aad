"""The provider-neutral model contract.

Everything above the providers — the round loop, the attempt ladder, tests — speaks these
types and nothing vendor-specific. A provider module translates them to one wire format
(OpenAI Chat Completions, Anthropic Messages) and translates every failure into the error
tree of `agent.core.errors`. Streaming providers emit `StreamEvent`s; `StreamAccumulator` folds
them into the same `ModelResponse` a non-streaming call returns, so callers never care which
one happened.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from agent.core.documents import Document
from agent.core.images import Image
from agent.models.schemas import closed_schema

if TYPE_CHECKING:
    from agent.core.ports import Showing

FinishReason: TypeAlias = Literal[
    "stop", "length", "tool_calls", "content_filter", "error", "other"
]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it: a name, what it is for, and a JSON Schema for its input,
    closed wherever it lists an object's properties (agent/models/schemas.py).
    `without_documents` is how it is offered in a request that carries no document (a
    control that asks for document citations only where one is attached); None: as is."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    without_documents: ToolSpec | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", closed_schema(self.parameters))


@dataclass(frozen=True, slots=True)
class NamedTool:
    """Force the model to call exactly this tool."""

    name: str


ToolChoice: TypeAlias = Literal["auto", "required", "none"] | NamedTool


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call. `arguments` is None when `raw_arguments` is not a JSON object."""

    id: str
    name: str
    raw_arguments: str
    arguments: Mapping[str, Any] | None = None

    @classmethod
    def from_raw(cls, id: str, name: str, raw_arguments: str) -> ToolCall:
        return cls(
            id=id, name=name, raw_arguments=raw_arguments, arguments=parse_arguments(raw_arguments)
        )


def parse_arguments(raw: str) -> Mapping[str, Any] | None:
    """Parse tool-call arguments; an empty string is an empty object, anything else must be one."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class SystemMessage:
    text: str


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A person's words, and the pictures and documents they showed with them (sent
    beside the text, to a model that takes them: agent/models/capabilities.py)."""

    text: str
    images: tuple[Image, ...] = ()
    documents: tuple[Document, ...] = ()


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    """The outcome of one tool call, fed back to the model. `is_error` marks a failed call."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    images: tuple[Image, ...] = ()  # pictures the tool returned (an MCP tool's image content)
    documents: tuple[Document, ...] = ()  # PDFs it returned (an MCP tool's embedded resource)


ModelMessage: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage


@dataclass(frozen=True, slots=True)
class CacheHint:
    """How a request may use the provider's prompt cache (agent/rounds/caching.py).

    `key` names the conversation, the same for all its rounds and messages (OpenAI's
    `prompt_cache_key`); the first `stable` messages are the conversation's stable prefix,
    the same in every later request of it (Anthropic marks a breakpoint after them, and
    after the tools, the system prompt and the last message)."""

    key: str
    stable: int = 0


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request. `temperature`, `top_p` and `stop` left unset take the route's settings
    (agent/models/routes.py); `end_user` is the opaque id of the person asked for, sent as
    the vendor's end-user field (OpenAI `user`, Anthropic `metadata.user_id`) when set;
    `output_schema` asks for a plain answer that is one JSON object of that schema
    (natively where the route declares structured output, else said in the prompt),
    closed like a tool's parameters (agent/models/schemas.py)."""

    messages: tuple[ModelMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = "auto"
    max_output_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] = ()
    provider_options: Mapping[str, Any] = field(default_factory=dict)
    cache: CacheHint | None = None
    top_p: float | None = None
    end_user: str | None = None
    output_schema: Mapping[str, Any] | None = None
    parallel_tool_calls: bool = True  # False: one tool call per step

    def __post_init__(self) -> None:
        if self.output_schema is not None:
            object.__setattr__(self, "output_schema", closed_schema(self.output_schema))


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one answer, as the provider reported them. `input_tokens` is the whole
    prompt, `cached_tokens` (read from the prompt cache) and `cache_write_tokens` (written
    to it: Anthropic charges those apart) included."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class PageCitation:
    """A passage of a document the answer's text cites, as the provider gave it
    (Anthropic's `page_location`): the document's index among the request's documents
    (0-based, in order), the cited text, and its pages (`end_page` exclusive)."""

    document_index: int
    cited_text: str
    start_page: int
    end_page: int
    document_title: str | None = None


@dataclass(frozen=True, slots=True)
class ModelResponse:
    text: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    usage: Usage
    model: str
    citations: tuple[PageCitation, ...] = ()  # of documents, in the answer's text


# Stream events. Tool-call events are keyed by the call's *index* in the response, because
# providers interleave the argument fragments of parallel calls and only the index is stable.
# The provider readers emit a call's `ToolCallStart` before its first `ToolCallDelta` and
# its `ToolCallEnd` after its last one; `StreamAccumulator` nevertheless accepts fragments
# before the start (an event source that is not one of our readers may send them).


@dataclass(frozen=True, slots=True)
class MessageStart:
    model: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    index: int
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    index: int


@dataclass(frozen=True, slots=True)
class Finish:
    reason: FinishReason
    usage: Usage
    # The document citations of the answer's text, gathered as they streamed.
    citations: tuple[PageCitation, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamError:
    """An error the provider reported inside the stream; the stream ends after it."""

    message: str


StreamEvent: TypeAlias = (
    MessageStart | TextDelta | ToolCallStart | ToolCallDelta | ToolCallEnd | Finish | StreamError
)


Watch: TypeAlias = Callable[[StreamEvent], Awaitable[None]]
"""Told each stream event of an answer as it arrives (see `Model.request`)."""


def events_of(response: ModelResponse) -> Iterator[StreamEvent]:
    """A whole answer as the stream that would have carried it, in one chunk."""
    yield MessageStart(response.model)
    if response.text:
        yield TextDelta(response.text)
    for index, call in enumerate(response.tool_calls):
        yield ToolCallStart(index, call.id, call.name)
        yield ToolCallDelta(index, call.raw_arguments)
        yield ToolCallEnd(index)
    yield Finish(response.finish_reason, response.usage, response.citations)


def join_deltas(events: Iterable[StreamEvent]) -> list[StreamEvent]:
    """`events` with each run of adjacent `TextDelta`s, and each run of adjacent
    `ToolCallDelta`s of one call, joined into one event. Nothing is reordered, so the
    joined events fold (and tap) to exactly what `events` do. A reader joins what one read
    of the wire brought: a model sends a delta every few characters, and every event handed
    on costs the same however short it is."""
    joined: list[StreamEvent] = []
    run: list[StreamEvent] = []
    for event in events:
        if run and not _joins(run[-1], event):
            joined.append(_joined(run))
            run = []
        run.append(event)
    if run:
        joined.append(_joined(run))
    return joined


def _joins(last: StreamEvent, event: StreamEvent) -> bool:
    """Whether `event` joins the run that `last` ends: text to text, arguments to the
    same call's. Any other event is a run of its own."""
    if isinstance(last, TextDelta):
        return isinstance(event, TextDelta)
    return (
        isinstance(last, ToolCallDelta)
        and isinstance(event, ToolCallDelta)
        and last.index == event.index
    )


def _joined(run: list[StreamEvent]) -> StreamEvent:
    first = run[0]
    if len(run) == 1:
        return first
    # A run holds one kind of event (`_joins`); the isinstance filters only tell mypy so.
    if isinstance(first, TextDelta):
        return TextDelta("".join(e.text for e in run if isinstance(e, TextDelta)))
    assert isinstance(first, ToolCallDelta)
    pieces = (e.arguments for e in run if isinstance(e, ToolCallDelta))
    return ToolCallDelta(first.index, "".join(pieces))


@dataclass(slots=True)
class _PartialCall:
    """One tool call as far as its events have told it."""

    id: str = ""
    name: str = ""
    fragments: list[str] = field(default_factory=list)

    def start(self, call_id: str, name: str) -> None:
        # The first non-empty id and name win: a start that arrives after the call's
        # fragments fills them in, and a repeated start cannot rename the call.
        self.id = self.id or call_id
        self.name = self.name or name

    def call(self) -> ToolCall:
        return ToolCall.from_raw(self.id, self.name, "".join(self.fragments))


class StreamAccumulator:
    """Folds stream events into a `ModelResponse`, the way a non-streaming call returns it.

    Tool calls are assembled by index in any interleaving: a call's fragments join in the
    order they arrive, whether its `ToolCallStart` comes before them, among them or after.
    """

    def __init__(self, model: str = "") -> None:
        self.model = model
        self._text: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self.finish_reason: FinishReason | None = None
        self.usage = Usage()
        self.citations: tuple[PageCitation, ...] = ()

    def feed(self, event: StreamEvent) -> None:
        match event:
            case MessageStart(model=model):
                self.model = model or self.model
            case TextDelta(text=text):
                self._text.append(text)
            case ToolCallStart(index=index, id=call_id, name=name):
                self._call(index).start(call_id, name)
            case ToolCallDelta(index=index, arguments=fragment):
                self._call(index).fragments.append(fragment)
            case Finish(reason=reason, usage=usage, citations=citations):
                self.finish_reason = reason
                self.usage = usage
                self.citations = citations
            case ToolCallEnd() | StreamError():
                pass

    def _call(self, index: int) -> _PartialCall:
        return self._calls.setdefault(index, _PartialCall())

    @property
    def text(self) -> str:
        return "".join(self._text)

    def result(self) -> ModelResponse:
        calls = tuple(call.call() for _, call in sorted(self._calls.items()))
        reason = self.finish_reason or ("tool_calls" if calls else "stop")
        return ModelResponse(self.text, calls, reason, self.usage, self.model, self.citations)


class Model(ABC):
    """One model on one route. `name` is the route as configured, e.g. `openai:gpt-4.1-mini`."""

    name: str

    @abstractmethod
    async def request(
        self,
        request: ModelRequest,
        *,
        watch: Watch | None = None,
        showing: Showing | None = None,
    ) -> ModelResponse:
        """Answer one request, raising a `ModelError` subclass on any failure.

        With `watch`, each stream event of the answer is awaited by it as it arrives, within
        the request's deadline (so `watch` must not wait on anything slow); a model that
        does not stream tells the whole answer at the end, as `events_of` spells it. Events
        of an answer that then fails were told all the same: the caller owns undoing them.

        With `showing` (the draft the answer is shown in), a streamed answer is read less
        often once the draft shows (gateway/models/transport.py); a model that does
        not stream over that transport ignores it.
        """

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one answer. The default streams a non-streaming answer as one chunk."""
        for event in events_of(await self.request(request)):
            yield event

    async def aclose(self) -> None:  # noqa: B027 - optional hook; most models hold nothing
        """Release the provider's connections."""
