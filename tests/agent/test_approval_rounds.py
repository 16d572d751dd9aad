"""A round that calls a tool needing approval: it pauses before anything of the step runs,
and the round that resumes it settles the step (approved calls at most once, others told
they were declined) and goes on as if it had never stopped. In memory, without I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from agent import (
    ApprovalDecision,
    ApprovalRequest,
    CallRun,
    Paused,
    PausedRound,
    RoundSoFar,
    Task,
)
from agent.models.contract import (
    AssistantMessage,
    ModelResponse,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from agent.models.function_model import FunctionModel, tool_response
from agent.rounds.control import FinalReply, Reply
from agent.rounds.loop import run_round
from agent.rounds.pause import round_state
from agent.rounds.resume import DECLINED, INTERRUPTED, TIMED_OUT, settle_step
from agent.rounds.tools import Toolbox, ToolContext, ToolRegistry, WorkTool

TASK = Task("T1:C1:1.0", "T1:C1:1.0", {"channel": "C1", "thread_ts": "1.0"})


class TextInput(BaseModel):
    text: str


class Deploy(WorkTool[TextInput]):
    """A tool that needs approval, counting its runs."""

    name = "deploy"
    description = "Deploy something."
    input_model = TextInput
    requires_approval = True

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def execute(self, context: ToolContext, input: TextInput) -> str:
        self.ran.append(input.text)
        return f"deployed {input.text}"


class Look(WorkTool[TextInput]):
    name = "look"
    description = "Look at something."
    input_model = TextInput

    async def execute(self, context: ToolContext, input: TextInput) -> str:
        return f"saw {input.text}"


@dataclass
class MemoryApprovals:
    """`ApprovalStore`'s call guard in memory (the pause itself is the test's data)."""

    runs: dict[str, CallRun] = field(default_factory=dict)

    async def start_call(self, task: Task, request_id: str) -> CallRun:
        if request_id in self.runs:
            return self.runs[request_id]
        self.runs[request_id] = CallRun("interrupted")  # started: until it finishes
        return CallRun("start")

    async def finish_call(
        self, task: Task, request_id: str, output: str, *, is_error: bool
    ) -> None:
        self.runs[request_id] = CallRun("done", output, is_error)

    async def pause(
        self, task: Task, paused: PausedRound, *, timeout_seconds: float
    ) -> PausedRound:
        return paused

    async def paused(self, task: Task) -> PausedRound | None:
        return None

    async def await_decisions(self, task: Task) -> None:
        pass


def toolbox(*tools: WorkTool[Any], approvals: bool = True) -> Toolbox:
    return Toolbox(ToolRegistry(list(tools)), ToolContext(TASK, approvals=approvals))


def scripted(*responses: ModelResponse) -> FunctionModel:
    queue = list(responses)
    return FunctionModel(lambda request: queue.pop(0))


def two_calls() -> ModelResponse:
    return ModelResponse(
        "",
        (
            ToolCall.from_raw("c_look", "look", '{"text": "logs"}'),
            ToolCall.from_raw("c_deploy", "deploy", '{"text": "v2"}'),
        ),
        "tool_calls",
        Usage(),
        "fake",
    )


async def paused_round(deploy: Deploy) -> tuple[Paused, list[UserMessage]]:
    messages = [UserMessage("deploy v2 after a look at the logs")]
    model = scripted(two_calls())
    decision = await run_round(model, messages, (FinalReply(),), toolbox=toolbox(deploy, Look()))
    assert isinstance(decision, Paused)
    return decision, messages


def stored(paused: Paused, verdict: str | None) -> PausedRound:
    [call] = paused.calls
    request = ApprovalRequest("task:x:approval:0:0", call.call_id, call.tool, call.arguments)
    decisions = (
        {} if verdict is None else {request.id: ApprovalDecision(verdict, "U1", datetime.now(UTC))}
    )  # type: ignore[arg-type]
    return PausedRound(0, 0, paused.state, (request,), decisions)


async def test_a_step_calling_a_gated_tool_pauses_before_anything_runs() -> None:
    """Neither the gated call nor the other call of its step runs; the pause names the
    gated call as the model made it."""
    deploy = Deploy()
    paused, _ = await paused_round(deploy)
    assert deploy.ran == []
    assert [(c.call_id, c.tool, c.arguments) for c in paused.calls] == [
        ("c_deploy", "deploy", '{"text": "v2"}')
    ]
    so_far = RoundSoFar.load(paused.state)
    assert [c.id for c in so_far.paused_calls] == ["c_look", "c_deploy"]


async def test_an_approved_call_runs_once_and_the_round_goes_on() -> None:
    """Resumed: the step's calls run (the approved one through the guard), the model reads
    both results after its calls, then replies; settling again does not run it again."""
    deploy, store = Deploy(), MemoryApprovals()
    paused, messages = await paused_round(deploy)
    so_far = await settle_step(stored(paused, "approved"), toolbox(deploy, Look()), store)
    assert deploy.ran == ["v2"]
    *_, look, done = so_far.tail
    assert isinstance(look, ToolResultMessage) and "saw logs" in look.content
    assert isinstance(done, ToolResultMessage) and "deployed v2" in done.content
    model = scripted(tool_response("final_reply", {"text": "shipped"}))
    reply = await run_round(
        model, messages, (FinalReply(),), toolbox=toolbox(deploy), so_far=so_far
    )
    assert reply == Reply("shipped")
    sent = model.requests[0].messages
    assert sent[0] == messages[0] and isinstance(sent[1], AssistantMessage)
    again = await settle_step(stored(paused, "approved"), toolbox(deploy, Look()), store)
    assert deploy.ran == ["v2"] and "deployed v2" in str(again.tail[-1])


async def test_a_denied_or_timed_out_call_never_runs_and_says_so() -> None:
    """The model reads, in the gated call's result, that the person declined (or nobody
    decided in time); the tool never ran."""
    deploy = Deploy()
    paused, _ = await paused_round(deploy)
    for verdict, text in (("denied", DECLINED), ("timed_out", TIMED_OUT), (None, TIMED_OUT)):
        so_far = await settle_step(
            stored(paused, verdict), toolbox(deploy, Look()), MemoryApprovals()
        )
        result = so_far.tail[-1]
        assert isinstance(result, ToolResultMessage) and result.is_error and result.content == text
    assert deploy.ran == []


async def test_a_call_that_died_mid_run_is_not_run_again() -> None:
    """Started and never finished (the process died): the next run tells the model the
    outcome is unknown instead of running it a second time."""
    deploy, store = Deploy(), MemoryApprovals()
    paused, _ = await paused_round(deploy)
    await store.start_call(TASK, "task:x:approval:0:0")  # the run that died
    so_far = await settle_step(stored(paused, "approved"), toolbox(deploy, Look()), store)
    assert deploy.ran == [] and so_far.tail[-1].content == INTERRUPTED  # type: ignore[union-attr]


async def test_gated_tools_are_withheld_where_nobody_can_be_asked() -> None:
    """Not offered to a sub-agent, nor on a runner without an approval store."""
    assert "deploy" not in toolbox(Deploy(), approvals=False)
    sub = Toolbox(ToolRegistry([Deploy()]), ToolContext(TASK, subtask_type="agent"))
    assert "deploy" not in sub


messages = st.one_of(
    st.builds(UserMessage, st.text()),
    st.builds(
        AssistantMessage,
        st.text(),
        st.lists(st.builds(ToolCall.from_raw, st.text(), st.text(), st.text()), max_size=3).map(
            tuple
        ),
    ),
    st.builds(ToolResultMessage, st.text(), st.text(), st.text(), st.booleans()),
)


@given(st.lists(messages, max_size=6), st.integers(0, 100), st.integers(0, 100))
def test_a_round_so_far_reads_back_as_written(tail: list[Any], steps: int, repairs: int) -> None:
    """Whatever the model wrote, the stored round reads back the same."""
    so_far = RoundSoFar.load(round_state(tail, steps=steps, repairs=repairs))
    assert so_far == RoundSoFar(tuple(tail), steps, repairs)


class Secretive(Look):
    """`look`, keeping nothing of what it saw (workspace search)."""

    name = "secretive"
    keeps_output = False


async def test_a_paused_round_keeps_nothing_of_an_unkept_tools_output() -> None:
    """A step that read a tool which keeps no output, then a step that waits for approval:
    the stored round has a note for the model where the output was, the rest as it was."""
    model = scripted(
        tool_response("secretive", {"text": "the roadmap"}, call_id="c_s"),
        tool_response("deploy", {"text": "v2"}, call_id="c_deploy"),
    )
    box = toolbox(Deploy(), Secretive(), Look())
    decision = await run_round(model, [UserMessage("deploy")], (FinalReply(),), toolbox=box)
    assert isinstance(decision, Paused)
    assert "saw the roadmap" not in decision.state
    [result] = [m for m in RoundSoFar.load(decision.state).tail if isinstance(m, ToolResultMessage)]
    assert (result.call_id, result.name) == ("c_s", "secretive")
    assert "not kept" in result.content and "Call secretive again" in result.content
