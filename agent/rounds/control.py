"""Control tools: the only ways a round can end.

A control tool has three parts: the tool as the model sees it (no execute), `select` —
which call counts when the model made several in one step — and `parse`, which turns the
call into a decision or raises `ControlCallError` with a message written for the model:
what was wrong and how to call it right. The round, not the provider, validates.

    final_reply   answer the user, optionally citing `[ref N]` messages and URLs the
                  model was shown (agent/rounds/citations.py); several calls in one step:
                  the last one counts
    delegate      post an acknowledgment now and start subtasks whose results come back
                  in the next round; two or more calls in one step are refused (`select`
                  raises), because each call would start its own batch of durable work
    no_reply      post nothing: offered only in a schedule's runs (agent/core/schedules.py),
                  so that a digest with nothing to say stays silent

Precedence is by commitment: `delegate` starts work and posts a message, so it outranks
`final_reply` in the same step, and anything that posts outranks `no_reply`.
`round_controls` returns the controls of a round in that order; the round loop lets the
first one called decide. The model is shown them in another order (`declared`):
`final_reply` first, so that the order of the tool list does not nudge it toward
delegating what it could answer; precedence stays the round's.

The round reads a call leniently and its values strictly: a key the schema does not have
is dropped, not refused (the schema still says `additionalProperties: false`, to tell the
model; a key it adds anyway costs no repair), while a value of the wrong type is refused.
`final_reply`'s text is stored trimmed, as `delegate`'s acknowledgment is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.core.approval import Paused
from agent.core.citations import Citation
from agent.core.delegation import Delegation, SubtaskRequest
from agent.core.errors import ControlCallError
from agent.core.ports import AnswerOrigin
from agent.core.schedules import Silence
from agent.core.text import storable_json, storable_text
from agent.models.contract import ToolCall, ToolSpec
from agent.rounds.citations import Citable, Passage
from agent.rounds.settings import DEFAULT_MAX_SUBTASKS
from agent.rounds.tools import model_schema, validation_problems

if TYPE_CHECKING:
    from agent.rounds.references import ReferenceCatalog
    from agent.rounds.subtask_types import SubtaskRegistry, SubtaskType

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Reply:
    """The round's outcome: this text is the answer the user reads, and what it cites."""

    text: str
    citations: tuple[Citation, ...] = ()
    # Which prompt and route produced it (set by the responder; not part of the answer).
    origin: AnswerOrigin | None = field(default=None, compare=False)
    # The turns its round took as it ran (`steer`, agent/rounds/steering.py), oldest first:
    # it answers them too, and is anchored after the newest (else `Task.newest_turn_id`).
    steered: tuple[str, ...] = field(default=(), compare=False)


# A round ends with a reply, a delegation, or paused at a step whose calls need a person
# (agent/core/approval.py; control tools never make that one, the loop does); a schedule's
# run may also end in silence.
Decision: TypeAlias = Reply | Delegation | Paused | Silence


class ControlTool(Protocol):
    @property
    def spec(self) -> ToolSpec: ...

    def select(self, calls: Sequence[ToolCall]) -> ToolCall:
        """The call that counts among this tool's calls in one step."""

    def parse(self, call: ToolCall) -> Decision: ...


def _parse_input(call: ToolCall, model: type[M], usage: str) -> M:
    """The call's arguments as `model`, or a `ControlCallError` that repeats `usage`."""
    if call.arguments is None:
        raise ControlCallError(
            f"{call.name} was called with arguments that are not a JSON object. {usage}"
        )
    try:
        # NUL and lone surrogates (JSON's \u0000, \ud800) would be refused by Postgres and by
        # pydantic's str; they are cleaned here, once, for every control tool.
        return model.model_validate(storable_json(call.arguments))
    except ValidationError as exc:
        raise ControlCallError(
            f"{call.name} arguments are invalid ({validation_problems(exc)}). {usage}"
        ) from exc


# More sources than this under one reply is a list, not a Sources line.
MAX_CITATIONS = 10


# Unknown keys are dropped, wrong types refused (the module docstring).
class _CitationInput(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    ref: int | None = None
    url: str | None = None
    # A passage of a document: its number, page and the cited text (agent/rounds/citations.py).
    document: int | None = None
    page: int | None = None
    quote: str | None = Field(default=None, max_length=2_000)

    def passage(self) -> Passage | None:
        if self.document is None:
            return None
        return Passage(self.document, self.page or 0, self.quote or "")


class _FinalReplyInput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str
    citations: list[_CitationInput] = Field(default_factory=list, max_length=MAX_CITATIONS)


_CITATIONS = {
    "type": "array",
    "maxItems": MAX_CITATIONS,
    "description": (
        "Optional: the sources of your answer, shown under it. Each item is either "
        '{"ref": N} for a [ref N] message of this conversation, {"url": "https://…"} '
        "for an address that appeared in what you read (messages, tool results), or "
        '{"document": N, "page": P, "quote": "…"} for a passage on page P of the PDF '
        'titled "document N" that you were given. Cite only what you were shown.'
    ),
    "items": {
        "type": "object",
        "properties": {
            "ref": {"type": "integer", "minimum": 1},
            "url": {"type": "string"},
            "document": {"type": "integer", "minimum": 1},
            "page": {"type": "integer", "minimum": 1},
            "quote": {"type": "string"},
        },
        "additionalProperties": False,
    },
}


# Where no document is attached, citations are asked for without the document form: a
# model told it may cite "document N" would cite one it was never given.
_CITATIONS_WITHOUT_DOCUMENTS = {
    "type": "array",
    "maxItems": MAX_CITATIONS,
    "description": (
        "Optional: the sources of your answer, shown under it. Each item is either "
        '{"ref": N} for a [ref N] message of this conversation, or {"url": "https://…"} '
        "for an address that appeared in what you read (messages, tool results). Cite only "
        "what you were shown."
    ),
    "items": {
        "type": "object",
        "properties": {
            "ref": {"type": "integer", "minimum": 1},
            "url": {"type": "string"},
        },
        "additionalProperties": False,
    },
}


def _final_reply_spec(citations: dict[str, Any], **more: Any) -> ToolSpec:
    return ToolSpec(
        name="final_reply",
        description=(
            "Send your answer to the user and end this round. Put the whole answer, in "
            "Markdown, in `text`; nothing else you write is shown to the user."
        ),
        parameters={
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "The answer, in Markdown."},
                "citations": citations,
            },
            "required": ["text"],
            "additionalProperties": False,
        },
        **more,
    )


class FinalReply:
    """`final_reply`: answer the user, optionally citing what the model was shown
    (`agent.rounds.citations`); a request that carries no document offers it without the
    document form of a citation (`ToolSpec.without_documents`). Several calls in one step:
    the last one counts."""

    usage = (
        'Call final_reply again with {"text": "<your answer>"} and, optionally, '
        '"citations": [{"ref": N} or {"url": "https://…"}].'
    )
    spec = _final_reply_spec(
        _CITATIONS, without_documents=_final_reply_spec(_CITATIONS_WITHOUT_DOCUMENTS)
    )

    def __init__(self, citable: Citable | None = None) -> None:
        self._citable = citable if citable is not None else Citable()

    def select(self, calls: Sequence[ToolCall]) -> ToolCall:
        return calls[-1]

    def parse(self, call: ToolCall) -> Reply:
        parsed = _parse_input(call, _FinalReplyInput, self.usage)
        if not parsed.text.strip():
            raise ControlCallError(
                "final_reply was called with an empty `text`. The user would see nothing. "
                "Call final_reply again with your full answer in `text`."
            )
        shapeless = [
            n
            for n, c in enumerate(parsed.citations)
            if [c.ref, c.url, c.document].count(None) != 2
            or (c.document is not None) != (c.page is not None)
        ]
        if shapeless:
            raise ControlCallError(
                f"final_reply was not sent: citations[{shapeless[0]}] must have exactly one of "
                f'"ref", "url" or "document" (with its "page"). {self.usage}'
            )
        refs = [c.ref for c in parsed.citations]
        urls = [c.url for c in parsed.citations]
        passages = [c.passage() for c in parsed.citations]
        return Reply(parsed.text.strip(), self._citable.resolve(refs, urls, passages))


class _SubtaskCall(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: str
    params: dict[str, Any] = Field(default_factory=dict)
    refs: list[int] = Field(default_factory=list)


class _DelegateInput(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    acknowledgment: str
    subtasks: list[_SubtaskCall]


class Delegate:
    """`delegate`: acknowledge now, run subtasks, continue in the next round."""

    def __init__(
        self,
        subtasks: SubtaskRegistry,
        catalog: ReferenceCatalog,
        *,
        max_subtasks: int = DEFAULT_MAX_SUBTASKS,
    ) -> None:
        if len(subtasks) == 0:
            raise ValueError("delegate needs at least one registered subtask type")
        self._registry = subtasks
        self._catalog = catalog
        self._max = max_subtasks
        self.spec = ToolSpec("delegate", _DELEGATE_DESCRIPTION, self._schema())
        self.usage = _delegate_usage(subtasks.names, max_subtasks)

    def select(self, calls: Sequence[ToolCall]) -> ToolCall:
        if len(calls) > 1:
            raise ControlCallError(
                f"delegate was called {len(calls)} times in one step, so none of them ran. "
                f"Call delegate once, with every subtask in its `subtasks` array. {self.usage}"
            )
        return calls[0]

    def parse(self, call: ToolCall) -> Delegation:
        parsed = _parse_input(call, _DelegateInput, self.usage)
        problems = self._shape_problems(parsed)
        requests: list[SubtaskRequest] = []
        for index, subtask in enumerate(parsed.subtasks):
            try:
                requests.append(self._request(index, subtask))
            except ControlCallError as exc:
                problems.append(str(exc))
        if problems:
            raise ControlCallError(f"delegate was not run: {'; '.join(problems)}. {self.usage}")
        return Delegation(
            parsed.acknowledgment.strip(),
            tuple(requests),
            call.id,
            storable_text(call.raw_arguments),
        )

    def _shape_problems(self, parsed: _DelegateInput) -> list[str]:
        problems = []
        if not parsed.acknowledgment.strip():
            problems.append("`acknowledgment` is empty, and it is what the thread sees now")
        if not 1 <= len(parsed.subtasks) <= self._max:
            problems.append(f"`subtasks` has {len(parsed.subtasks)} items; give 1 to {self._max}")
        return problems

    def _request(self, index: int, call: _SubtaskCall) -> SubtaskRequest:
        where = f"subtasks[{index}]"
        kind = self._registry.get(call.type)
        if kind is None:
            known = ", ".join(self._registry.names)
            raise ControlCallError(f"{where}.type {call.type!r} is unknown (use one of: {known})")
        try:
            params = kind.params.model_validate(call.params).model_dump(mode="json")
        except ValidationError as exc:
            raise ControlCallError(f"{where}.params: {validation_problems(exc)}") from exc
        try:
            references = self._catalog.resolve(call.refs)
        except ControlCallError as exc:
            raise ControlCallError(f"{where}.refs: {exc}") from exc
        return SubtaskRequest(call.type, params, references)

    def _schema(self) -> dict[str, Any]:
        variants = [_subtask_schema(kind) for kind in self._registry]
        items = variants[0] if len(variants) == 1 else {"anyOf": variants}
        subtasks = {"type": "array", "minItems": 1, "maxItems": self._max, "items": items}
        return {
            "type": "object",
            "properties": {"acknowledgment": _ACKNOWLEDGMENT, "subtasks": subtasks},
            "required": ["acknowledgment", "subtasks"],
            "additionalProperties": False,
        }


_DELEGATE_DESCRIPTION = (
    "Hand work to subtasks that run in the background, and end this round. "
    "`acknowledgment` is posted in the conversation right away; the subtasks' results come "
    "back to you in your next round, where you answer with final_reply. Use it when an "
    "answer needs work that takes a while or benefits from a focused helper. A subtask "
    "sees only its params and the messages it cites in `refs` (the N of [ref N])."
)
_ACKNOWLEDGMENT = {
    "type": "string",
    "description": "A short message posted in the conversation now, e.g. 'Looking into it…'.",
}


def _subtask_schema(kind: SubtaskType[Any]) -> dict[str, Any]:
    refs = {
        "type": "array",
        "items": {"type": "integer", "minimum": 1},
        "description": "Numbers N of [ref N] messages this subtask needs to read.",
    }
    return {
        "type": "object",
        "description": f"Subtask type {kind.name!r}: {kind.description}",
        "properties": {
            "type": {"type": "string", "enum": [kind.name]},
            "params": model_schema(kind.params),
            "refs": refs,
        },
        "required": ["type", "params"],
        "additionalProperties": False,
    }


def _delegate_usage(names: Sequence[str], max_subtasks: int) -> str:
    example = {
        "acknowledgment": "Looking into it…",
        "subtasks": [{"type": names[0], "params": {"...": "..."}, "refs": [1]}],
    }
    return (
        f"Call delegate once, like {json.dumps(example, ensure_ascii=False)}, with 1 to "
        f"{max_subtasks} subtasks of type {', '.join(names)}; each type's params are in "
        "the tool's schema, and `refs` is optional."
    )


class _NoReplyInput(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    reason: str = ""


class NoReply:
    """`no_reply`: a schedule's run ends and posts nothing (agent/core/schedules.py)."""

    usage = 'Call no_reply again with {"reason": "<why there is nothing to post>"}.'
    spec = ToolSpec(
        name="no_reply",
        description=(
            "Post nothing this time and end this round. Only for this scheduled run, when "
            "there is nothing worth posting (an empty digest, nothing new since last time). "
            "Say why in `reason`; it is not shown in Slack."
        ),
        parameters={
            "type": "object",
            "properties": {"reason": {"type": "string", "description": "Why, for the logs."}},
            "additionalProperties": False,
        },
    )

    def select(self, calls: Sequence[ToolCall]) -> ToolCall:
        return calls[-1]

    def parse(self, call: ToolCall) -> Silence:
        return Silence(storable_text(_parse_input(call, _NoReplyInput, self.usage).reason))


def round_controls(
    *,
    final: bool,
    subtasks: SubtaskRegistry,
    catalog: ReferenceCatalog,
    max_subtasks: int = DEFAULT_MAX_SUBTASKS,
    citable: Citable | None = None,
    silent: bool = False,
) -> tuple[ControlTool, ...]:
    """The controls a round offers, in precedence order.

    Every round offers `final_reply`; `delegate` only when a subtask type exists and the
    round is not the task's last; `no_reply` only when it may end `silent` (a schedule's run).
    """
    reply = FinalReply(citable if citable is not None else Citable(catalog))
    quiet: tuple[ControlTool, ...] = (NoReply(),) if silent else ()
    if final or len(subtasks) == 0:
        return (reply, *quiet)
    return (Delegate(subtasks, catalog, max_subtasks=max_subtasks), reply, *quiet)


def declared(controls: Sequence[ControlTool]) -> tuple[ToolSpec, ...]:
    """The controls' specs in the order the model is shown them: `final_reply` first, the
    others in precedence order after it (the module docstring says why)."""
    specs = [c.spec for c in controls]
    return tuple(sorted(specs, key=lambda spec: spec.name != FinalReply.spec.name))
