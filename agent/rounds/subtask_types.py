"""Subtask types: the kinds of work `delegate` can start, and the registry that offers them.

A subtask type is a name, a description (the model reads it in the system prompt and in
the delegate tool), a pydantic params model (its schema is nested in the delegate tool)
and `run(context, params, references) -> str`; a type that asks a model under a system
prompt of its own declares it (`prompt`), so that a session's epoch pins it with the
round's (agent/durable/responder.py) and `run` is handed the pinned one (`context.prompt`). The runner runs each subtask as a leased
row of its own; the text `run` returns is the result the next round reads. Raise to
report a failure: the responder turns it into `SubtaskFailed` with a message for the model.

This module is only the contract: the delegate tool validates calls against it, so it
must not import the round loop. The built-in type lives in `agent.rounds.subagent`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from agent.core.ports import Task
from agent.models.ladder import Attempts
from agent.rounds.registry import Registry
from agent.rounds.settings import DEFAULT_ROUND, RoundSettings
from agent.rounds.tools import ToolContext, ToolRegistry

ParamsT = TypeVar("ParamsT", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class SubtaskContext:
    """What a running subtask may use: its task, the model ladder and the work tools."""

    task: Task
    attempts: Attempts
    tools: ToolRegistry
    tool_context: ToolContext
    settings: RoundSettings = DEFAULT_ROUND
    # The sub-agent's conversation, for the provider's prompt cache (agent/rounds/caching.py);
    # None: caching is off.
    cache_key: str | None = None
    # The type's system prompt as the task's session pinned it (None: the type's own).
    prompt: str | None = None


class SubtaskType(ABC, Generic[ParamsT]):
    """A kind of work `delegate` can start; subclass it to add one."""

    name: str
    description: str
    params: type[ParamsT]
    # The system prompt its model calls use, if it has one: pinned with a session's epoch.
    prompt: str | None = None

    @abstractmethod
    async def run(
        self, context: SubtaskContext, params: ParamsT, references: tuple[str, ...]
    ) -> str:
        """Do the work and return the result text the next round reads."""


class SubtaskRegistry(Registry[SubtaskType[Any]]):
    """The subtask types a deployment offers, by unique name, in a stable order."""

    @property
    def noun(self) -> str:
        return "subtask type"
