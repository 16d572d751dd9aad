"""Work tools: what the model may do inside a round before it ends the round.

A work tool is a name, a description, a pydantic input model (whose JSON Schema is what
the model sees) and `execute(context, input) -> str` (or a `ToolOutput`: text and the
pictures the tool returned, which reach a model that can see them). The round runs the work calls of a
step through a `Toolbox` — the registry bound to one task's `ToolContext` — and feeds the
results back. Nothing a tool does can crash the round: input that does not validate and
exceptions raised inside a tool both become failed tool results the model reads and can
act on. A `ToolFailed` (the tool's service said no: an MCP server's error) is logged as one
line without a traceback; anything else a tool raises is a bug, logged with its traceback.

The calls of one step run **concurrently**: a model that asks for several tools in one
step has said they do not depend on each other (that is what parallel tool calls mean),
and most tools wait on I/O. Results are fed back in call order, one per call id. Each
call is bounded in time (`tool_timeout_seconds`) and its output in length
(`tool_output_chars`): a slow or verbose tool costs one failed or shortened result, never
the round.

A tool may bound itself more tightly or loosely than the round (`timeout_seconds`,
`output_chars`: an MCP server's own limits), and may offer a JSON Schema of its own instead
of a pydantic model's (`input_schema` and `parse_input`: an MCP tool passes on the schema
its server declared). Every call is told to the context's `ToolObserver`, if any, when it
starts and when it ends, built-in and MCP tools alike; an observer that fails is logged
and ignored. While a call runs its tool may report progress (`ToolContext.progress`, set
for each call): each report is told to the observer too, as a "running" record with its
`progress`, so the thread can show it.

Built-ins: `current_time` (from the injected clock, so tests need no real time) and
`read_thread` (more of the conversation than the window shows, through `ThreadReader`,
which renders each message in the same provenance tag as the conversation's turns).
What a tool returns is framed as data by the round (`agent.rounds.framing`), not here;
turn tags in it are escaped there, except in the output of a tool that says it shows
people's messages in the gateway's turn tags (`shows_turns`: `read_thread`).
Plugins add tools by subclassing `WorkTool` (see `agent.rounds.plugins`).

A tool whose calls must wait for a person (`requires_approval`: the MCP config's
`requireApproval`) is offered only where someone can be asked (`ToolContext.approvals`: a
task's own rounds on a runner that stores pauses), never to a sub-agent; the round pauses
before such a call runs (agent/core/approval.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.core.documents import Document
from agent.core.errors import ToolFailed
from agent.core.images import Image
from agent.core.ports import (
    Task,
    ThreadReader,
    ToolCallRecord,
    ToolCallState,
    ToolObserver,
    ToolProgress,
)
from agent.models.contract import ToolCall, ToolResultMessage, ToolSpec
from agent.models.schemas import closed_schema
from agent.rounds.registry import Registry
from agent.rounds.settings import DEFAULT_ROUND, RoundSettings

log = logging.getLogger(__name__)

InputT = TypeVar("InputT", bound=BaseModel)
Clock = Callable[[], datetime]
ProgressReport = Callable[[ToolProgress], Awaitable[None]]
CONTROL_NAMES = frozenset({"final_reply", "delegate", "no_reply"})
LOGGED_ERROR_CHARS = 300  # of a tool's error message in its log line


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool returned: its text, and pictures (an MCP tool's image content) and PDFs
    (its embedded resources), sent with the result to a model that can see or read them
    and named to one that cannot."""

    text: str
    images: tuple[Image, ...] = ()
    documents: tuple[Document, ...] = ()


def utc_now() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a work tool may know about the round it runs in."""

    task: Task
    thread_reader: ThreadReader | None = None
    clock: Clock = utc_now
    observer: ToolObserver | None = None
    # The subtask type the tools run for; None in a task's own rounds. Tools given to some
    # subtask types only (MCP servers, per the config file) decide with it in `available`.
    subtask_type: str | None = None
    # Whether a person can be asked to approve a call here (a task's own rounds, on a
    # runner that stores pauses: agent/core/approval.py).
    approvals: bool = False
    # Set by the toolbox for the call being executed: where the tool reports how far it
    # has come (an MCP server's progress notifications), shown while the call runs.
    progress: ProgressReport | None = None


class WorkTool(ABC, Generic[InputT]):
    """A tool the model calls to learn or do something; its result goes back to the model."""

    name: str
    description: str
    input_model: type[InputT]
    # None: the round's `tool_timeout_seconds` and `tool_output_chars` apply.
    timeout_seconds: float | None = None
    output_chars: int | None = None
    # A call waits for a person's approval before it runs (agent/core/approval.py).
    requires_approval: bool = False
    # True only for a tool whose output is people's messages in the turn tags the gateway
    # rendered (`read_thread`): the round keeps those tags. Any other tool's turn tags are
    # escaped, so a page it fetched cannot pass for a person's words.
    shows_turns: bool = False
    # False for a tool whose output may reach the model but must not outlive the round
    # (workspace search: what it found belongs to Slack): observers (the stored tool
    # calls) and a paused round's state get a note of its size instead (`withheld`).
    keeps_output: bool = True

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.input_schema)

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema the model sees: the input model's, unless a tool offers its own."""
        return model_schema(self.input_model)

    def parse_input(self, arguments: Mapping[str, Any]) -> InputT:
        """The call's arguments as this tool's input; a `ValueError` written for the model
        when they do not fit."""
        try:
            return self.input_model.model_validate(arguments)
        except ValidationError as exc:
            raise ValueError(
                f"{self.name} input is invalid ({validation_problems(exc)}). "
                "Call it again with input matching its schema."
            ) from exc

    def available(self, context: ToolContext) -> bool:
        """Whether the tool can work in `context`; unavailable tools are not offered."""
        return True

    @abstractmethod
    async def execute(self, context: ToolContext, input: InputT) -> str | ToolOutput:
        """Do the work and return the text the model reads; raise to report a failure."""


class ToolRegistry(Registry[WorkTool[Any]]):
    """The work tools a deployment offers, by unique name (control tool names are taken)."""

    reserved = CONTROL_NAMES

    @property
    def noun(self) -> str:
        return "tool"


class Toolbox:
    """The registry's available tools, bound to one task's context: what a round runs."""

    def __init__(
        self, registry: ToolRegistry, context: ToolContext, settings: RoundSettings = DEFAULT_ROUND
    ) -> None:
        self.context = context
        self._tools = {t.name: t for t in registry if _offered(t, context)}
        self._timeout = settings.tool_timeout_seconds
        self._max_chars = settings.tool_output_chars

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec for t in self._tools.values())

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def needs_approval(self, name: str) -> bool:
        """Whether a call of `name` waits for a person before it runs."""
        tool = self._tools.get(name)
        return tool is not None and tool.requires_approval

    def shows_turns(self, name: str) -> bool:
        """Whether the tool `name` returns people's messages in the gateway's turn tags."""
        tool = self._tools.get(name)
        return tool is not None and tool.shows_turns

    @property
    def unkept(self) -> frozenset[str]:
        """The tools whose output is shown to the model and kept nowhere (`keeps_output`)."""
        return frozenset(name for name, tool in self._tools.items() if not tool.keeps_output)

    async def run(self, calls: Sequence[ToolCall]) -> list[ToolResultMessage]:
        """Run the calls concurrently; one result per call, in call order."""
        return list(await asyncio.gather(*(self._run_one(call) for call in calls)))

    async def _run_one(self, call: ToolCall) -> ToolResultMessage:
        await self._observe(call, "running")
        progress = _CallProgress(self, call)
        try:
            result = await self._result(call, replace(self.context, progress=progress.report))
        finally:
            progress.ended = True
        shown = result.content if self._tools[call.name].keeps_output else withheld(result)
        await self._observe(call, "error" if result.is_error else "ok", shown)
        return result

    async def _result(self, call: ToolCall, context: ToolContext) -> ToolResultMessage:
        tool = self._tools[call.name]
        try:
            parsed = _validate(tool, call)
        except ValueError as exc:
            return ToolResultMessage(call.id, call.name, str(exc), is_error=True)
        timeout = tool.timeout_seconds or self._timeout
        try:
            async with asyncio.timeout(timeout):
                output = await tool.execute(context, parsed)
        except TimeoutError:
            log.warning("tool %s ran past its %g s time limit", call.name, timeout)
            text = (
                f"{call.name} did not finish within its time limit ({timeout:g} s) and "
                "was stopped. Try it with a smaller request, or go on without it."
            )
            return ToolResultMessage(call.id, call.name, text, is_error=True)
        except ToolFailed as exc:  # the tool's world said no: one line, no traceback
            about = f" ({exc.source})" if exc.source else ""
            log.warning("tool %s%s failed: %s", call.name, about, one_line(str(exc)))
            text = f"{call.name} failed: {type(exc).__name__}: {exc}"
            return ToolResultMessage(call.id, call.name, text, is_error=True)
        except Exception as exc:  # a bug of ours or a plugin's: the traceback is the lead
            log.warning("tool %s failed", call.name, exc_info=True)
            text = f"{call.name} failed: {type(exc).__name__}: {exc}"
            return ToolResultMessage(call.id, call.name, text, is_error=True)
        result = output if isinstance(output, ToolOutput) else ToolOutput(output)
        text = _capped(result.text, tool.output_chars or self._max_chars)
        return ToolResultMessage(
            call.id, call.name, text, images=result.images, documents=result.documents
        )

    async def _observe(
        self,
        call: ToolCall,
        state: ToolCallState,
        output: str = "",
        progress: ToolProgress | None = None,
    ) -> None:
        observer = self.context.observer
        if observer is None:
            return
        record = ToolCallRecord(
            call.id,
            call.name,
            call.raw_arguments,
            state,
            output,
            self.context.subtask_type,
            progress,
        )
        try:
            await observer.tool_call(self.context.task, record)
        except Exception:
            log.warning("the tool observer failed on %s (%s)", call.name, state, exc_info=True)


class _CallProgress:
    """Where one call's tool reports progress: told to the observer as a "running" record.

    An MCP SDK runs each progress callback as a task of its own, so reports can arrive out
    of order, or after the call returned: one that goes back (the spec has progress only
    grow) or comes after the end is dropped — a card must not go back to "in progress"
    once it shows the outcome."""

    def __init__(self, box: Toolbox, call: ToolCall) -> None:
        self._box = box
        self._call = call
        self._last = float("-inf")
        self.ended = False

    async def report(self, progress: ToolProgress) -> None:
        if self.ended or progress.progress < self._last:
            return
        self._last = progress.progress
        await self._box._observe(self._call, "running", progress=progress)


def _offered(tool: WorkTool[Any], context: ToolContext) -> bool:
    """A tool is offered where it can work; one that needs approval only where a person
    can be asked (never to a sub-agent: a subtask cannot wait for anyone)."""
    if tool.requires_approval and not context.approvals:
        return False
    return tool.available(context)


def one_line(text: str, limit: int = LOGGED_ERROR_CHARS) -> str:
    """`text` as one log line: its line breaks become spaces, cut at `limit` characters (a
    server's error may be a page long, or a stack trace of its own)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else f"{flat[:limit]}… [{len(flat):,} characters]"


def withheld(result: ToolResultMessage) -> str:
    """What is kept of the output of a tool that keeps none: its size, and an error's text
    (written by the tool for the model, it quotes nothing it found)."""
    if result.is_error:
        return result.content
    return f"[{len(result.content):,} characters shown to the model and not kept]"


def _capped(output: str, max_chars: int) -> str:
    """At most `max_chars` characters, saying so when cut: a tool that returns a megabyte
    must not fill the context window (and the bill) of every later step."""
    if len(output) <= max_chars:
        return output
    return (
        f"{output[:max_chars]}\n[output cut: {len(output):,} characters, only the "
        f"first {max_chars:,} are shown]"
    )


def _validate(tool: WorkTool[Any], call: ToolCall) -> Any:
    """The call's input as the tool takes it, or a `ValueError` written for the model."""
    if call.arguments is None:
        raise ValueError(
            f"{call.name} was called with arguments that are not a JSON object. "
            "Call it again with a JSON object matching its input schema."
        )
    return tool.parse_input(call.arguments)


def validation_problems(exc: ValidationError) -> str:
    """A pydantic error as one line a model can act on: `where: what` per problem."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors())


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of `model` with every `$ref` inlined, closed as every schema offered
    to a model is (agent/models/schemas.py; shared: do not mutate it).

    Inlined schemas can be nested anywhere (the delegate tool nests each subtask type's
    params) and every provider accepts them; a recursive model is a `ValueError`.
    """
    return _model_schema(model)


@functools.cache  # otherwise rebuilt for every model request; input models do not change
def _model_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})
    inlined = _inline(schema, definitions, depth=0)
    assert isinstance(inlined, dict)
    return closed_schema(inlined)


def _inline(node: Any, definitions: Mapping[str, Any], depth: int) -> Any:
    if depth > 32:
        raise ValueError("recursive input models cannot be offered to a model as a tool")
    if isinstance(node, list):
        return [_inline(item, definitions, depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("$ref"), str):
        target = definitions[node["$ref"].rsplit("/", 1)[-1]]
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _inline({**target, **rest}, definitions, depth + 1)
    return {k: _inline(v, definitions, depth + 1) for k, v in node.items()}


class CurrentTimeInput(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CurrentTime(WorkTool[CurrentTimeInput]):
    """`current_time`: the model has no clock of its own."""

    name = "current_time"
    description = "The current date and time in UTC, as ISO-8601 (e.g. 2026-01-01T12:00:00+00:00)."
    input_model = CurrentTimeInput

    async def execute(self, context: ToolContext, input: CurrentTimeInput) -> str:
        return context.clock().astimezone(UTC).isoformat(timespec="seconds")


class ReadThreadInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(
        default=50, ge=1, le=200, description="How many of the latest messages to read."
    )


class ReadThread(WorkTool[ReadThreadInput]):
    """`read_thread`: more of the conversation than the window the model was shown."""

    name = "read_thread"
    description = (
        "Read the latest messages of the current conversation (oldest first), including "
        "ones older than what you were shown, each in its provenance tag. Use it when the "
        "answer depends on earlier context."
    )
    input_model = ReadThreadInput
    shows_turns = True  # each line is a turn the gateway rendered (`agent.ThreadReader`)

    def available(self, context: ToolContext) -> bool:
        return context.thread_reader is not None

    async def execute(self, context: ToolContext, input: ReadThreadInput) -> str:
        assert context.thread_reader is not None  # guaranteed by `available`
        lines = await context.thread_reader.read_thread(context.task, limit=input.limit)
        return "\n".join(lines) if lines else "The conversation has no messages yet."


def builtin_tools() -> ToolRegistry:
    """A registry holding the built-in tools."""
    return ToolRegistry([CurrentTime(), ReadThread()])
