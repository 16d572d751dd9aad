"""Control tools: the only ways a round can end.

A control tool has three parts: the tool as the model sees it (no execute), `select` —
which call counts when the model made several in one step — and `parse`, which turns the
call into a decision or raises `ControlCallError` with a message written for the model:
what was wrong and how to call it right. The round, not the provider, validates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from agent.errors import ControlCallError
from agent.model import ToolCall, ToolSpec


@dataclass(frozen=True, slots=True)
class Reply:
    """The round's outcome: this text is the answer the user reads."""

    text: str


Decision = Reply


class ControlTool(Protocol):
    @property
    def spec(self) -> ToolSpec: ...

    def select(self, calls: Sequence[ToolCall]) -> ToolCall:
        """The call that counts among this tool's calls in one step."""

    def parse(self, call: ToolCall) -> Decision: ...


class _FinalReplyInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


class FinalReply:
    """`final_reply`: answer the user. Several calls in one step: the last one counts."""

    spec = ToolSpec(
        name="final_reply",
        description=(
            "Send your answer to the user and end this round. Put the whole answer, in "
            "Markdown, in `text`; nothing else you write is shown to the user."
        ),
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The answer, in Markdown."}},
            "required": ["text"],
            "additionalProperties": False,
        },
    )

    def select(self, calls: Sequence[ToolCall]) -> ToolCall:
        return calls[-1]

    def parse(self, call: ToolCall) -> Reply:
        if call.arguments is None:
            raise ControlCallError(
                "final_reply was called with arguments that are not a JSON object. "
                'Call it again with {"text": "<your answer>"}.'
            )
        try:
            parsed = _FinalReplyInput.model_validate(call.arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors()
            )
            raise ControlCallError(
                f"final_reply arguments are invalid ({problems}). "
                'Call it again with exactly {"text": "<your answer>"}.'
            ) from exc
        if not parsed.text.strip():
            raise ControlCallError(
                "final_reply was called with an empty `text`. The user would see nothing. "
                "Call final_reply again with your full answer in `text`."
            )
        return Reply(parsed.text)
