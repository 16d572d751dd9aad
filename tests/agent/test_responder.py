"""The responder: one round through the ladder, with the right controls and tools."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from agent.core.delegation import (
    Delegation,
    RoundInput,
    RoundRecord,
    SubtaskOutcome,
    SubtaskRequest,
)
from agent.core.errors import TransientModelError
from agent.core.ports import StoredMessage, Task
from agent.durable.responder import ModelResponder, ResponderPorts, ResponderSettings
from agent.models.contract import ModelRequest, ModelResponse, SystemMessage, ToolResultMessage
from agent.models.function_model import FunctionModel, tool_response
from agent.models.ladder import AttemptLadder
from agent.rounds.control import Reply
from agent.rounds.prompt import system_prompt
from agent.rounds.settings import RoundSettings
from agent.rounds.subagent import builtin_subtask_types
from agent.rounds.tools import builtin_tools

TASK = Task("t1", "s1", {"channel": "C1"})
WINDOW = (
    StoredMessage("m1", "s1", "user", "turn", "<turn>earlier</turn>"),
    StoredMessage("m2", "s1", "user", "turn", "<turn>now</turn>"),
)
NOON = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)


class Reader:
    def __init__(self) -> None:
        self.tasks: list[Task] = []

    async def read_thread(self, task: Task, *, limit: int) -> Sequence[str]:
        self.tasks.append(task)
        return ["a line"]


async def _no_sleep(delay: float) -> None:
    return None


def scripted(*responses: ModelResponse | Exception) -> FunctionModel:
    queue = list(responses)

    def answer(request: ModelRequest) -> ModelResponse:
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    return FunctionModel(answer)


def responder(
    model: FunctionModel, reader: Reader | None = None, **settings: int
) -> ModelResponder:
    return ModelResponder(
        AttemptLadder([model], sleep=_no_sleep),
        tools=builtin_tools(),
        subtasks=builtin_subtask_types(),
        ports=ResponderPorts(thread_reader=reader),
        settings=ResponderSettings(round=RoundSettings(**settings)),
        clock=lambda: NOON,
    )


async def test_a_round_ends_in_a_reply() -> None:
    """final_reply's text is the decision; controls come first (final_reply before
    delegate), then the work tools."""
    model = scripted(tool_response("final_reply", {"text": "hi"}))
    assert await responder(model, Reader())(RoundInput(TASK, WINDOW)) == Reply("hi")
    request = model.requests[0]
    assert [t.name for t in request.tools] == [
        "final_reply",
        "delegate",
        "current_time",
        "read_thread",
    ]
    assert request.messages[0] == SystemMessage(system_prompt(builtin_subtask_types()))


async def test_a_round_can_delegate_citing_the_window() -> None:
    """A delegate call becomes a Delegation whose refs resolve against the window."""
    arguments = {
        "acknowledgment": "Looking into it…",
        "subtasks": [{"type": "agent", "params": {"instructions": "check"}, "refs": [2]}],
    }
    model = scripted(tool_response("delegate", arguments, call_id="d1"))
    decision = await responder(model)(RoundInput(TASK, WINDOW))
    assert isinstance(decision, Delegation)
    assert decision.subtasks == (
        SubtaskRequest("agent", {"instructions": "check"}, ("<turn>now</turn>",)),
    )


async def test_the_max_subtasks_setting_bounds_delegate() -> None:
    """RoundSettings.max_subtasks is the delegate tool's bound."""
    model = scripted(tool_response("final_reply", {"text": "hi"}))
    await responder(model, max_subtasks=2)(RoundInput(TASK, WINDOW))
    assert model.requests[0].tools[1].parameters["properties"]["subtasks"]["maxItems"] == 2


async def test_the_final_round_offers_no_delegate() -> None:
    """In a final round only final_reply and work tools are offered."""
    model = scripted(tool_response("final_reply", {"text": "hi"}))
    await responder(model)(RoundInput(TASK, WINDOW, number=1, final=True))
    assert [t.name for t in model.requests[0].tools] == ["final_reply", "current_time"]


async def test_later_rounds_see_earlier_outcomes() -> None:
    """The next round's transcript ends with the delegate call's outcomes."""
    record = RoundRecord(0, "d1", "{}", (SubtaskOutcome(0, "agent", "done", "42"),))
    model = scripted(tool_response("final_reply", {"text": "it is 42"}))
    await responder(model)(RoundInput(TASK, WINDOW, rounds=(record,), number=1))
    last = model.requests[0].messages[-1]
    assert isinstance(last, ToolResultMessage) and last.call_id == "d1" and "42" in last.content


async def test_work_tools_get_the_task_and_clock() -> None:
    """read_thread reads the round's task; current_time uses the injected clock."""
    reader = Reader()
    model = scripted(
        tool_response("read_thread", {"limit": 5}, call_id="a"),
        tool_response("current_time", {}, call_id="b"),
        tool_response("final_reply", {"text": "ok"}),
    )
    await responder(model, reader)(RoundInput(TASK, WINDOW))
    assert reader.tasks == [TASK]
    assert "\n2026-01-02T12:00:00+00:00\n" in model.requests[2].messages[-1].content  # type: ignore[union-attr]


async def test_a_transient_failure_retries_the_whole_round() -> None:
    """The ladder reruns the round from its start after a transient error."""
    model = scripted(TransientModelError("503"), tool_response("final_reply", {"text": "hi"}))
    assert await responder(model)(RoundInput(TASK, WINDOW)) == Reply("hi")
    assert model.requests[0].messages == model.requests[1].messages


async def test_defaults_offer_only_final_reply() -> None:
    """Without registries the responder offers final_reply alone."""
    model = scripted(tool_response("final_reply", {"text": "hi"}))
    await ModelResponder(AttemptLadder([model]))(RoundInput(TASK, WINDOW))
    assert [t.name for t in model.requests[0].tools] == ["final_reply"]
