"""A round stopped for a person's approval, written down and picked up again.

When a step calls a tool that needs approval (agent/core/approval.py), the round stops
before anything of the step runs. What it had — the model's messages after the
transcript (its own calls, the results it read, the runtime notes of repairs), the step
that asked, and its counts of work steps and repairs — is written as JSON
(`round_state`) and stored with the pause. The round's next run reads it back
(`RoundSoFar.load`), settles the paused step (agent/rounds/resume.py) and goes on from
there (`agent.rounds.loop.run_round(so_far=…)`), as if it had never stopped: the model
sees the same conversation, with the step's results after its calls.

The output of a tool that keeps none (`WorkTool.keeps_output`: workspace search) is not
stored either: the resumed round reads a note that it is gone.

Only the round's own messages are stored, never the transcript: the next run renders the
transcript again from the window and the rounds, as every round does. A person's pictures
are never among the round's own messages (they are in the transcript).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.core.errors import AgentError
from agent.models.contract import (
    AssistantMessage,
    ModelMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)


class PauseStateError(AgentError):
    """A stored round state that cannot be read (written by another version, or damaged)."""


@dataclass(frozen=True, slots=True)
class RoundSoFar:
    """A round's own messages after its transcript, and its counts of work steps and
    repairs (each bounded per round: they carry over)."""

    tail: tuple[ModelMessage, ...] = ()
    steps: int = 0
    repairs: int = 0

    @classmethod
    def load(cls, state: str) -> RoundSoFar:
        """The round as `round_state` wrote it; `PauseStateError` if it cannot be read."""
        try:
            data = json.loads(state)
            tail = tuple(_message(m) for m in data["tail"])
            return cls(tail, int(data["steps"]), int(data["repairs"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise PauseStateError(f"the paused round's state cannot be read ({exc})") from exc

    @property
    def paused_calls(self) -> tuple[ToolCall, ...]:
        """The calls of the step the round stopped at (its last message)."""
        last = self.tail[-1] if self.tail else None
        return last.tool_calls if isinstance(last, AssistantMessage) else ()


def round_state(
    tail: Sequence[ModelMessage], *, steps: int, repairs: int, unkept: Collection[str] = ()
) -> str:
    """The round so far as JSON, for the store (`RoundSoFar.load` reads it back); the
    results of the tools in `unkept` (`WorkTool.keeps_output`) are not stored: the
    resumed round reads that they are gone and may call the tool again."""
    plain = [_plain(_without_output(m) if _unkept(m, unkept) else m) for m in tail]
    return json.dumps({"tail": plain, "steps": steps, "repairs": repairs}, ensure_ascii=False)


def _unkept(message: ModelMessage, unkept: Collection[str]) -> bool:
    return isinstance(message, ToolResultMessage) and message.name in unkept


def _without_output(message: ModelMessage) -> ModelMessage:
    assert isinstance(message, ToolResultMessage)
    if message.is_error:  # the tool's own words to the model: nothing it found
        return message
    note = (
        f"[What {message.name} returned was not kept while the round waited for approval. "
        f"Call {message.name} again if you still need it.]"
    )
    return ToolResultMessage(message.call_id, message.name, note, message.is_error)


def _plain(message: ModelMessage) -> dict[str, Any]:
    if isinstance(message, AssistantMessage):
        calls = [
            {"id": c.id, "name": c.name, "arguments": c.raw_arguments} for c in message.tool_calls
        ]
        return {"role": "assistant", "text": message.text, "calls": calls}
    if isinstance(message, ToolResultMessage):
        return {
            "role": "tool",
            "call_id": message.call_id,
            "name": message.name,
            "content": message.content,
            "is_error": message.is_error,
        }
    if isinstance(message, UserMessage):
        return {"role": "user", "text": message.text}
    raise TypeError(f"a round's own messages are never {type(message).__name__}")


def _message(data: Mapping[str, Any]) -> ModelMessage:
    role = data["role"]
    if role == "assistant":
        calls = tuple(ToolCall.from_raw(c["id"], c["name"], c["arguments"]) for c in data["calls"])
        return AssistantMessage(str(data["text"]), calls)
    if role == "tool":
        return ToolResultMessage(
            str(data["call_id"]), str(data["name"]), str(data["content"]), bool(data["is_error"])
        )
    if role == "user":
        return UserMessage(str(data["text"]))
    raise ValueError(f"unknown role {role!r}")
