"""One round: ask the model until it ends the round through a control tool.

Prose is not an outcome. A reply without a tool call, a call to a tool that does not
exist, or a control call that does not parse is answered — as a failed tool result, or a
runtime note for prose — and the model is asked again, at most `max_repairs` times. Then
the round fails with `RoundFailed`, and the attempt ladder decides what happens next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.control import ControlTool, Decision
from agent.errors import ControlCallError, RoundFailed
from agent.model import (
    AssistantMessage,
    Model,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

PROSE_NOTE = (
    "<runtime>Your last message was not shown to anyone. End this round by calling one of "
    "the tools you were given; to answer the user, call final_reply.</runtime>"
)
NOT_RUN = "Not run: another call in the same step was rejected. Fix that call and try again."


@dataclass(frozen=True, slots=True)
class RoundSettings:
    max_repairs: int = 3
    max_output_tokens: int | None = 4096
    temperature: float | None = None


DEFAULT_ROUND = RoundSettings()


async def run_round(
    model: Model,
    messages: Sequence[ModelMessage],
    controls: Sequence[ControlTool],
    settings: RoundSettings = DEFAULT_ROUND,
) -> Decision:
    """Run one round on `model` and return the decision of its control call."""
    conversation = list(messages)
    tools = tuple(c.spec for c in controls)
    for _ in range(settings.max_repairs + 1):
        response = await model.request(
            ModelRequest(
                tuple(conversation),
                tools=tools,
                tool_choice="required",
                max_output_tokens=settings.max_output_tokens,
                temperature=settings.temperature,
            )
        )
        conversation.append(AssistantMessage(response.text, response.tool_calls))
        decision, feedback = decide(response, controls)
        if decision is not None:
            return decision
        conversation.extend(feedback)
    raise RoundFailed(
        f"{model.name} did not end the round with a valid control call "
        f"after {settings.max_repairs} repairs."
    )


def decide(
    response: ModelResponse, controls: Sequence[ControlTool]
) -> tuple[Decision | None, list[ModelMessage]]:
    """The decision in this step, or the feedback that asks the model to repair it."""
    if not response.tool_calls:
        return None, [UserMessage(PROSE_NOTE)]
    by_name = {c.spec.name: c for c in controls}
    unknown = [call for call in response.tool_calls if call.name not in by_name]
    if unknown:
        return None, _feedback(
            response.tool_calls, {c.id: _unknown_tool(c, by_name) for c in unknown}
        )
    # Controls are offered in precedence order: the first one called decides the step.
    control = next(
        c for c in controls if any(call.name == c.spec.name for call in response.tool_calls)
    )
    chosen = control.select(
        [call for call in response.tool_calls if call.name == control.spec.name]
    )
    try:
        return control.parse(chosen), []
    except ControlCallError as exc:
        return None, _feedback(response.tool_calls, {chosen.id: str(exc)})


def _unknown_tool(call: ToolCall, known: dict[str, ControlTool]) -> str:
    return f"There is no tool named {call.name!r}. The tools you can call are: {', '.join(sorted(known))}."


def _feedback(calls: Sequence[ToolCall], errors: dict[str, str]) -> list[ModelMessage]:
    """A result for every call of the step (providers require one per call id)."""
    return [
        ToolResultMessage(call.id, call.name, errors.get(call.id, NOT_RUN), is_error=True)
        for call in calls
    ]
