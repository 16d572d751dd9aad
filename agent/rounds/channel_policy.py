"""A channel's boundary, as the agent applies it: the tools its rounds are offered, the
instructions added to its system prompt, the model ladder that answers it, and how many
model requests one of its messages may make.

Which policy a task has is the gateway's to say (a task's channel is in its address,
which only the gateway reads): it hands the responder a `PolicyOf`, asked once per round,
subtask or summary, so a policy swapped meanwhile applies from the next one on.

Tools are withheld from the schema, not from the prompt: the round's toolbox is built from
`toolset`, the work tools whose names one of `tools`' globs matches (`fnmatch` rules,
case-sensitive: `orders__*` for an MCP server's tools, `read_thread` for one built-in), so
a tool not matched is absent from the request's `tools`; a call to it anyway is refused by
the round like a call to a tool that does not exist (`agent.rounds.loop`), and never runs.
Control tools are not work tools: every round offers them whatever the policy says. A
task's subtasks are given the same toolset (`ModelResponder.run_subtask`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal, TypeAlias

from agent.core.ports import Task
from agent.models.ladder import Attempts
from agent.rounds.tools import ToolRegistry

ALL_TOOLS = ("*",)

# How a thread's messages that arrive while its task works are answered
# (THREADGATE_THREAD_QUEUE; storage/thread_queue.py): `steer` is the one a round acts on
# (agent/rounds/steering.py), the others the queue decides when it claims.
ThreadQueueMode: TypeAlias = Literal["collect", "steer", "followup", "interrupt"]
THREAD_QUEUE_MODES: tuple[ThreadQueueMode, ...] = ("collect", "steer", "followup", "interrupt")


@dataclass(frozen=True, slots=True)
class ChannelPolicy:
    """One channel's boundary; the defaults are the deployment's own (no boundary)."""

    tools: tuple[str, ...] = ALL_TOOLS  # globs of the work-tool names offered
    instructions: str = ""  # added after the deployment's instructions
    attempts: Attempts | None = None  # None: the deployment's attempt ladder
    max_model_requests: int | None = None  # per message (0: no cap); None: the deployment's
    thread_queue: ThreadQueueMode = "followup"  # the channel's queue mode

    def offers(self, tool: str) -> bool:
        """Whether a work tool of this name is offered in the channel."""
        return any(fnmatchcase(tool, pattern) for pattern in self.tools)

    def toolset(self, registry: ToolRegistry) -> ToolRegistry:
        """The tools of `registry` the channel is offered, in their order."""
        if self.tools == ALL_TOOLS:
            return registry
        return ToolRegistry(tool for tool in registry if self.offers(tool.name))


DEFAULT_POLICY = ChannelPolicy()

# The policy of a task's channel (the gateway's `ChannelPolicies.policy_of`).
PolicyOf = Callable[[Task], ChannelPolicy]


def combined_instructions(deployment: str, channel: str) -> str:
    """The operator instructions of a channel's prompt: the deployment's, then its own."""
    return "\n\n".join(part.strip() for part in (deployment, channel) if part.strip())
