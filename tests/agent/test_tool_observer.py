"""Every work-tool call is told to the context's `ToolObserver` as it starts and ends, in
a task's rounds and in its sub-agents alike; an observer that fails changes nothing."""

from __future__ import annotations

from agent import (
    AgentSubtask,
    AttemptLadder,
    ModelResponder,
    ResponderPorts,
    RoundInput,
    Subtask,
    SubtaskRegistry,
    SubtaskRequest,
    Task,
    Toolbox,
    ToolCall,
    ToolCallRecord,
    ToolContext,
    tool_response,
)
from agent.rounds.tools import ToolRegistry, WorkTool, builtin_tools
from tests.agent.test_responder import NOON, TASK, WINDOW, scripted
from tests.agent.test_tools import EchoInput


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, ToolCallRecord]] = []

    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        self.seen.append((task.id, record))


class Broken:
    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        raise RuntimeError("the display is down")


async def test_a_call_is_observed_as_it_starts_and_ends() -> None:
    recorder = Recorder()
    box = Toolbox(builtin_tools(), ToolContext(TASK, clock=lambda: NOON, observer=recorder))
    ok, bad = await box.run(
        [
            ToolCall.from_raw("c1", "current_time", "{}"),
            ToolCall.from_raw("c2", "current_time", "[1]"),
        ]
    )
    records = [record for _, record in recorder.seen]
    assert {(r.call_id, r.state) for r in records} == {
        ("c1", "running"),
        ("c1", "ok"),
        ("c2", "running"),
        ("c2", "error"),
    }
    ended = {r.call_id: r for r in records if r.state != "running"}
    assert ended["c1"].output == ok.content == NOON.isoformat(timespec="seconds")
    assert ended["c2"].output == bad.content and ended["c2"].arguments == "[1]"
    assert all(r.output == "" for r in records if r.state == "running")


async def test_an_observer_that_fails_does_not_fail_the_tool() -> None:
    box = Toolbox(builtin_tools(), ToolContext(TASK, clock=lambda: NOON, observer=Broken()))
    [result] = await box.run([ToolCall.from_raw("c1", "current_time", "{}")])
    assert not result.is_error


async def test_the_responder_hands_its_observer_to_rounds_and_sub_agents() -> None:
    """A round's call and a sub-agent's call both reach the observer, for the task; the
    sub-agent's says which subtask type made it (the thread keeps it off the reply)."""
    recorder = Recorder()
    model = scripted(
        tool_response("current_time", {}, call_id="round-call"),
        tool_response("final_reply", {"text": "done"}),
        tool_response("current_time", {}, call_id="sub-call"),
        tool_response("final_reply", {"text": "sub done"}),
    )
    responder = ModelResponder(
        AttemptLadder([model]),
        tools=builtin_tools(),
        subtasks=SubtaskRegistry([AgentSubtask()]),
        clock=lambda: NOON,
        ports=ResponderPorts(tool_observer=recorder),
    )
    await responder(RoundInput(TASK, WINDOW))
    subtask = Subtask(TASK.id, 0, 0, SubtaskRequest("agent", {"instructions": "look"}, ()))
    assert await responder.run_subtask(subtask, TASK) == "sub done"
    assert [(task, r.call_id, r.state, r.subtask_type) for task, r in recorder.seen] == [
        (TASK.id, "round-call", "running", None),
        (TASK.id, "round-call", "ok", None),
        (TASK.id, "sub-call", "running", "agent"),
        (TASK.id, "sub-call", "ok", "agent"),
    ]


class Secretive(WorkTool[EchoInput]):
    """A tool whose output the model reads and nothing keeps (workspace search)."""

    name = "secretive"
    description = "Find something that must not be kept."
    input_model = EchoInput
    keeps_output = False

    async def execute(self, context: ToolContext, input: EchoInput) -> str:
        if input.word == "refuse":
            raise ValueError("secretive could not look: say so in your reply.")
        return f"found {input.word} in a private channel"


async def test_a_tool_that_keeps_no_output_is_observed_with_a_note_of_its_size() -> None:
    """The model reads the output; the observer (the stored tool calls) gets its size only,
    and an error the tool wrote for the model as it is."""
    recorder = Recorder()
    registry = ToolRegistry([Secretive()])
    box = Toolbox(registry, ToolContext(TASK, clock=lambda: NOON, observer=recorder))
    found, refused = await box.run(
        [
            ToolCall.from_raw("c1", "secretive", '{"word": "plans"}'),
            ToolCall.from_raw("c2", "secretive", '{"word": "refuse"}'),
        ]
    )
    assert found.content == "found plans in a private channel"
    ended = {r.call_id: r for _, r in recorder.seen if r.state != "running"}
    assert "plans" not in ended["c1"].output
    assert (
        ended["c1"].output == f"[{len(found.content)} characters shown to the model and not kept]"
    )
    assert refused.is_error and ended["c2"].output == refused.content
    assert box.unkept == {"secretive"}
