"""Subtask types: the kinds of work `delegate` can start.

A subtask type is a name, a description (the model reads it in the system prompt and in
the delegate tool), a pydantic params model (its schema is nested in the delegate tool)
and `run(context, params, references) -> str`. The runner runs each subtask as a leased
row of its own; the text `run` returns is the result the next round reads. Raise to
report a failure: the responder turns it into `SubtaskFailed` with a message for the model.

The built-in type `agent` is a focused sub-agent: it gets instructions and the cited
messages, runs its own round loop with the work tools (it cannot delegate further) on the
same model ladder, and reports the text of its `final_reply`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from agent.control import FinalReply, Reply
from agent.errors import RoundFailed
from agent.model import Model, ModelMessage, SystemMessage, UserMessage
from agent.ports import Task
from agent.rounds import DEFAULT_ROUND, Attempts, RoundSettings, run_round
from agent.tools import Toolbox, ToolContext, ToolRegistry

ParamsT = TypeVar("ParamsT", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class SubtaskContext:
    """What a running subtask may use: its task, the model ladder and the work tools."""

    task: Task
    attempts: Attempts
    tools: ToolRegistry
    tool_context: ToolContext
    settings: RoundSettings = DEFAULT_ROUND


class SubtaskType(ABC, Generic[ParamsT]):
    """A kind of work `delegate` can start; subclass it to add one."""

    name: str
    description: str
    params: type[ParamsT]

    @abstractmethod
    async def run(
        self, context: SubtaskContext, params: ParamsT, references: tuple[str, ...]
    ) -> str:
        """Do the work and return the result text the next round reads."""


class SubtaskRegistry:
    """The subtask types a deployment offers, by unique name, in a stable order."""

    def __init__(self, types: Iterable[SubtaskType[Any]] = ()) -> None:
        self._types: dict[str, SubtaskType[Any]] = {}
        for kind in types:
            self.register(kind)

    def register(self, kind: SubtaskType[Any]) -> None:
        """Add `kind`; a name already taken is a `ValueError`."""
        if kind.name in self._types:
            raise ValueError(f"a subtask type named {kind.name!r} is already registered")
        self._types[kind.name] = kind

    def get(self, name: str) -> SubtaskType[Any] | None:
        return self._types.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._types)

    def __iter__(self) -> Iterator[SubtaskType[Any]]:
        return iter(self._types.values())

    def __len__(self) -> int:
        return len(self._types)


SUBAGENT_PROMPT = """\
You are a focused helper working for an assistant in a Slack workspace. The assistant \
gave you one job; you do not talk to the people in the conversation, and nothing you \
write reaches them directly. Use the tools you were given when they help. When you are \
done, call final_reply with your findings, complete and self-contained: the assistant \
reads only that text. If you could not do the job, say so and why.
"""


class AgentParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    instructions: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] = Field(
        description="The job, self-contained: the helper sees nothing else but cited refs."
    )


class AgentSubtask(SubtaskType[AgentParams]):
    """`agent`: a sub-agent with the work tools that reports its final_reply."""

    name = "agent"
    description = (
        "A focused helper that works on one self-contained job with the work tools and "
        "reports its findings back to you. It sees only its instructions and cited refs."
    )
    params = AgentParams

    async def run(
        self, context: SubtaskContext, params: AgentParams, references: tuple[str, ...]
    ) -> str:
        messages = subagent_messages(params.instructions, references)
        toolbox = Toolbox(context.tools, context.tool_context)

        async def attempt(model: Model) -> str:
            decision = await run_round(
                model, messages, (FinalReply(),), context.settings, toolbox=toolbox
            )
            if not isinstance(decision, Reply):  # only final_reply was offered
                raise RoundFailed(f"{model.name} ended a sub-agent round without final_reply")
            return decision.text

        return await context.attempts.run(attempt)


def subagent_messages(instructions: str, references: tuple[str, ...]) -> list[ModelMessage]:
    """The sub-agent's conversation: its prompt, then the job with the cited messages."""
    cited = "".join(
        f"\n\n<reference n={n}>\n{text}\n</reference>" for n, text in enumerate(references, 1)
    )
    intro = "\n\nMessages from the conversation you may need:" if references else ""
    return [SystemMessage(SUBAGENT_PROMPT), UserMessage(f"{instructions}{intro}{cited}")]


def builtin_subtask_types() -> SubtaskRegistry:
    """A registry holding the built-in subtask types."""
    return SubtaskRegistry([AgentSubtask()])
