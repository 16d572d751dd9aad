"""A channel's policy in the agent: the tools withheld from the schema (and refused when
called anyway, in rounds and subtasks), its instructions in a prompt of its own, its
ladder and its cap on model requests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agent.core.delegation import RoundInput, Subtask, SubtaskRequest
from agent.core.errors import ModelBudgetExceeded
from agent.core.ports import Task
from agent.durable.compaction import Compaction
from agent.durable.responder import ModelResponder, ResponderPorts, ResponderSettings
from agent.models.contract import ModelRequest, ModelResponse, SystemMessage, ToolResultMessage
from agent.models.function_model import FunctionModel, text_response, tool_response
from agent.models.ladder import AttemptLadder
from agent.rounds.channel_policy import ChannelPolicy, combined_instructions
from agent.rounds.control import Reply
from agent.rounds.prompt import system_prompt
from agent.rounds.subagent import builtin_subtask_types
from agent.rounds.tools import builtin_tools
from tests.agent.test_memory import DROPPED, Summaries
from tests.agent.test_request_cap import Meter
from tests.agent.test_responder import WINDOW, Reader, _no_sleep

SUPPORT = Task("t1", "s1", {"channel": "CSUPPORT"})
OPS = Task("t2", "s2", {"channel": "COPS"})
ONLY_CLOCK = ChannelPolicy(tools=("current_time",), instructions="You are the support desk.")


def by_channel(**policies: ChannelPolicy) -> Callable[[Task], ChannelPolicy]:
    return lambda task: policies.get(task.address["channel"], ChannelPolicy())


def answering(*responses: ModelResponse) -> FunctionModel:
    """Answers in order, then `final_reply` for every later request."""
    queue = list(responses)
    return FunctionModel(
        lambda request: queue.pop(0) if queue else tool_response("final_reply", {"text": "ok"})
    )


def responder(model: FunctionModel) -> ModelResponder:
    return ModelResponder(
        AttemptLadder([model], sleep=_no_sleep),
        tools=builtin_tools(),
        subtasks=builtin_subtask_types(),
        policies=by_channel(CSUPPORT=ONLY_CLOCK),
        ports=ResponderPorts(thread_reader=Reader()),
        settings=ResponderSettings(instructions="House rules."),
    )


def names(request: ModelRequest) -> list[str]:
    return [tool.name for tool in request.tools]


async def test_a_channel_is_offered_only_its_tools_and_controls_always() -> None:
    """The support channel's request lists the controls and current_time, not read_thread;
    another channel's lists every tool."""
    model = answering()
    ask = responder(model)
    await ask(RoundInput(SUPPORT, WINDOW))
    await ask(RoundInput(OPS, WINDOW))
    assert names(model.requests[0]) == ["final_reply", "delegate", "current_time"]
    assert names(model.requests[1]) == ["final_reply", "delegate", "current_time", "read_thread"]


async def test_a_call_to_a_withheld_tool_is_refused_and_never_runs() -> None:
    """read_thread exists but is not the support channel's: the call comes back as a
    failed result naming the tools it may call, and the thread is never read."""
    reader = Reader()
    model = answering(tool_response("read_thread", {"limit": 5}))
    ask = ModelResponder(
        AttemptLadder([model], sleep=_no_sleep),
        tools=builtin_tools(),
        ports=ResponderPorts(thread_reader=reader),
        policies=by_channel(CSUPPORT=ONLY_CLOCK),
    )
    assert await ask(RoundInput(SUPPORT, WINDOW)) == Reply("ok")
    result = model.requests[1].messages[-1]
    assert isinstance(result, ToolResultMessage) and result.is_error
    assert "no tool named 'read_thread'" in result.content and "current_time" in result.content
    assert reader.tasks == []


async def test_a_subtask_inherits_its_channels_tools() -> None:
    """The sub-agent of a support task is offered current_time only, and its call to
    read_thread is refused as in the task's own rounds."""
    reader = Reader()
    model = answering(tool_response("read_thread", {"limit": 5}))
    ask = ModelResponder(
        AttemptLadder([model], sleep=_no_sleep),
        tools=builtin_tools(),
        subtasks=builtin_subtask_types(),
        ports=ResponderPorts(thread_reader=reader),
        policies=by_channel(CSUPPORT=ONLY_CLOCK),
    )
    subtask = Subtask("t1", 0, 0, SubtaskRequest("agent", {"instructions": "look it up"}))
    assert await ask.run_subtask(subtask, SUPPORT) == "ok"
    assert names(model.requests[0]) == ["final_reply", "current_time"]
    assert reader.tasks == []


async def test_a_channels_instructions_make_a_prompt_and_an_epoch_of_their_own() -> None:
    """The support channel's system prompt has the deployment's instructions, then its
    own; its epoch is that prompt's, and another channel keeps the deployment's."""
    model = answering()
    ask = responder(model)
    await ask(RoundInput(SUPPORT, WINDOW))
    await ask(RoundInput(OPS, WINDOW))
    subtasks = builtin_subtask_types()
    own = system_prompt(subtasks, combined_instructions("House rules.", ONLY_CLOCK.instructions))
    assert model.requests[0].messages[0] == SystemMessage(own)
    assert "House rules.\n\nYou are the support desk." in own
    assert model.requests[1].messages[0] == SystemMessage(system_prompt(subtasks, "House rules."))
    assert ask.epoch_of(SUPPORT).text == own and ask.epoch_of(OPS).text != own
    assert ask.epoch_of(SUPPORT).hash != ask.epoch_of(OPS).hash


async def test_a_channel_with_a_ladder_of_its_own_is_answered_by_it() -> None:
    """Rounds, subtasks and plain-text answers of the channel go to its ladder; others to
    the deployment's."""
    deployment, own = answering(), answering()
    own.name = "openai:gpt-support"
    policy = ChannelPolicy(attempts=AttemptLadder([own], sleep=_no_sleep))
    ask = ModelResponder(
        AttemptLadder([deployment], sleep=_no_sleep), policies=by_channel(CSUPPORT=policy)
    )
    decision = await ask(RoundInput(SUPPORT, WINDOW))
    await ask(RoundInput(OPS, WINDOW))
    assert len(own.requests) == 1 and len(deployment.requests) == 1
    assert decision.origin is not None and decision.origin.route is not None
    assert decision.origin.route.model == "gpt-support"


async def test_a_channels_cap_on_model_requests_replaces_the_deployments() -> None:
    """With a cap of 1 in the channel, a round that needs a second request stops."""
    meter = Meter()
    model = answering(tool_response("current_time", {}))
    ask = ModelResponder(
        AttemptLadder([model], sleep=_no_sleep),
        tools=builtin_tools(),
        ports=ResponderPorts(meter=meter),
        settings=ResponderSettings(max_model_requests=50),
        policies=by_channel(CSUPPORT=ChannelPolicy(max_model_requests=1)),
    )
    with pytest.raises(ModelBudgetExceeded):
        await ask(RoundInput(SUPPORT, WINDOW))
    assert len(model.requests) == 1


async def test_a_summary_re_pins_the_session_to_its_channels_prompt() -> None:
    """Compaction given the responder's `epoch_of` moves a support session to the
    support channel's prompt, not the deployment's."""
    ask = responder(answering(text_response("the summary")))
    store = Summaries(DROPPED)
    compaction = Compaction(store, ask.ask_text, epoch=ask.epoch_of)
    assert await compaction(SUPPORT, WINDOW)
    assert store.epochs == [ask.epoch_of(SUPPORT)] and store.epochs[0] != ask.epoch_of(OPS)
