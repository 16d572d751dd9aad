"""The bounds of one round, shared by the round loop, the delegate tool and sub-agents.

They live apart from the loop so that the delegate tool (which needs `max_subtasks`) and
the subtask types (which hand settings to a sub-agent's loop) do not import the loop that
imports them.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_SUBTASKS = 4
DEFAULT_MAX_OUTPUT_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class RoundSettings:
    """Bounds of one round: repairs and work steps are counted separately."""

    max_repairs: int = 3
    max_steps: int = 8
    max_subtasks: int = DEFAULT_MAX_SUBTASKS
    max_output_tokens: int | None = DEFAULT_MAX_OUTPUT_TOKENS
    temperature: float | None = None
    tool_timeout_seconds: float = 30.0
    tool_output_chars: int = 20_000


DEFAULT_ROUND = RoundSettings()
