"""The one object the task runner needs: run a round, run a subtask.

`ModelResponder(round_input)` renders the round (system prompt, numbered window, earlier
delegations), offers its controls and work tools, and lets the attempt ladder run the
round on each model slot in turn (retrying what is transient, falling back on what is
not, stopping on a refused credential). What comes out is a `Decision`: a `Reply` to
post, or a `Delegation` whose subtasks the runner runs through `run_subtask`.

`run_subtask` reports every way a subtask can fail as `SubtaskFailed` — its message is
what the next round reads — except the model-layer stops (`CredentialRejected`,
`QuotaExhausted`, `ModelsUnavailable`), which propagate unchanged so the runner alerts
the operator or retries later exactly as it does for a round.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from agent.core.delegation import RoundInput, Subtask
from agent.core.errors import CredentialRejected, ModelsUnavailable, QuotaExhausted, SubtaskFailed
from agent.core.ports import Task, ThreadReader
from agent.models.contract import Model
from agent.models.ladder import Attempts
from agent.rounds.control import Decision, round_controls
from agent.rounds.loop import run_round
from agent.rounds.prompt import transcript
from agent.rounds.references import ReferenceCatalog
from agent.rounds.settings import DEFAULT_ROUND, RoundSettings
from agent.rounds.subtask_types import SubtaskContext, SubtaskRegistry, SubtaskType
from agent.rounds.tools import (
    Clock,
    Toolbox,
    ToolContext,
    ToolRegistry,
    utc_now,
    validation_problems,
)

__all__ = ["Attempts", "ModelResponder"]

_STOPS = (CredentialRejected, QuotaExhausted, ModelsUnavailable)


class ModelResponder:
    """Runs rounds and subtasks for the task runner, on one attempt ladder."""

    def __init__(
        self,
        attempts: Attempts,
        *,
        tools: ToolRegistry | None = None,
        subtasks: SubtaskRegistry | None = None,
        thread_reader: ThreadReader | None = None,
        settings: RoundSettings = DEFAULT_ROUND,
        clock: Clock = utc_now,
    ) -> None:
        self._attempts = attempts
        self._tools = tools if tools is not None else ToolRegistry()
        self._subtasks = subtasks if subtasks is not None else SubtaskRegistry()
        self._reader = thread_reader
        self._settings = settings
        self._clock = clock

    async def __call__(self, round_input: RoundInput) -> Decision:
        """Run one round of the task and return how it ended."""
        catalog = ReferenceCatalog.from_window(round_input.window)
        messages = transcript(round_input, catalog, self._subtasks)
        controls = round_controls(
            final=round_input.final,
            subtasks=self._subtasks,
            catalog=catalog,
            max_subtasks=self._settings.max_subtasks,
        )
        toolbox = Toolbox(self._tools, self._tool_context(round_input.task), self._settings)

        async def attempt(model: Model) -> Decision:
            return await run_round(model, messages, controls, self._settings, toolbox=toolbox)

        return await self._attempts.run(attempt)

    async def run_subtask(self, subtask: Subtask, task: Task) -> str:
        """The subtask's result text, or `SubtaskFailed` saying (for the model) why not."""
        kind = self._kind(subtask.request.type)
        params = _params(kind, subtask)
        try:
            return await kind.run(self._subtask_context(task), params, subtask.request.references)
        except _STOPS:
            raise
        except SubtaskFailed:
            raise
        except Exception as exc:
            raise SubtaskFailed(
                f"Subtask {kind.name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _kind(self, name: str) -> SubtaskType[Any]:
        kind = self._subtasks.get(name)
        if kind is None:
            known = ", ".join(self._subtasks.names) or "none"
            raise SubtaskFailed(
                f"There is no subtask type {name!r} (available: {known}); it did not run."
            )
        return kind

    def _tool_context(self, task: Task) -> ToolContext:
        return ToolContext(task, self._reader, self._clock)

    def _subtask_context(self, task: Task) -> SubtaskContext:
        return SubtaskContext(
            task, self._attempts, self._tools, self._tool_context(task), self._settings
        )


def _params(kind: SubtaskType[Any], subtask: Subtask) -> Any:
    """The stored params as the type's model; they were valid when delegated, but the
    type may have changed since (a plugin upgrade between rounds)."""
    try:
        return kind.params.model_validate(subtask.request.params)
    except ValidationError as exc:
        raise SubtaskFailed(
            f"Subtask {kind.name!r} did not run: its params are invalid "
            f"({validation_problems(exc)})."
        ) from exc
