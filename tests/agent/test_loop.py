"""The round loop: a round ends only through a valid control call, repairs are bounded."""

from __future__ import annotations

import pytest

from agent.core.errors import RoundFailed
from agent.models.contract import (
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from agent.models.function_model import FunctionModel, text_response, tool_response
from agent.rounds.control import FinalReply, Reply
from agent.rounds.loop import PROSE_NOTE, run_round
from agent.rounds.settings import RoundSettings

CONTROLS = (FinalReply(),)


def scripted(*responses: ModelResponse) -> FunctionModel:
    queue = list(responses)
    return FunctionModel(lambda request: queue.pop(0))


async def test_final_reply_ends_the_round_with_its_text() -> None:
    """A valid final_reply is the round's decision; tool choice is `required`."""
    model = scripted(tool_response("final_reply", {"text": "hello"}))
    assert await run_round(model, [UserMessage("hi")], CONTROLS) == Reply("hello")
    assert model.requests[0].tool_choice == "required"
    assert [t.name for t in model.requests[0].tools] == ["final_reply"]


async def test_prose_is_not_an_outcome() -> None:
    """Text without a tool call gets a runtime note and the model is asked again."""
    model = scripted(text_response("just prose"), tool_response("final_reply", {"text": "ok"}))
    assert await run_round(model, [UserMessage("hi")], CONTROLS) == Reply("ok")
    assert model.requests[1].messages[-1] == UserMessage(PROSE_NOTE)


@pytest.mark.parametrize(
    "arguments",
    [{"text": ""}, {"text": "  \n"}, {}, {"text": 3}, {"text": 3, "extra": 1}],
)
async def test_invalid_final_reply_is_fed_back_as_a_failed_tool_result(
    arguments: dict[str, object],
) -> None:
    """Blank, missing or mistyped arguments are rejected back to the model."""
    model = scripted(
        tool_response("final_reply", arguments, call_id="c1"),
        tool_response("final_reply", {"text": "ok"}),
    )
    assert await run_round(model, [UserMessage("hi")], CONTROLS) == Reply("ok")
    feedback = model.requests[1].messages[-1]
    assert (
        isinstance(feedback, ToolResultMessage) and feedback.is_error and feedback.call_id == "c1"
    )
    assert "final_reply" in feedback.content


async def test_arguments_that_are_not_json_are_rejected() -> None:
    """Unparseable arguments are a failed tool result, not a crash."""
    broken = ModelResponse(
        "",
        (ToolCall.from_raw("c1", "final_reply", '{"text": "unterminated'),),
        "tool_calls",
        Usage(),
        "m",
    )
    model = scripted(broken, tool_response("final_reply", {"text": "ok"}))
    assert await run_round(model, [UserMessage("hi")], CONTROLS) == Reply("ok")
    assert "JSON object" in model.requests[1].messages[-1].content  # type: ignore[union-attr]


async def test_unknown_tool_is_repaired_and_every_call_gets_a_result() -> None:
    """A call to a tool that does not exist is answered for every call id of the step."""
    calls = (
        ToolCall.from_raw("a", "search_web", "{}"),
        ToolCall.from_raw("b", "final_reply", '{"text": "too early"}'),
    )
    model = scripted(
        ModelResponse("", calls, "tool_calls", Usage(), "m"),
        tool_response("final_reply", {"text": "ok"}),
    )
    assert await run_round(model, [UserMessage("hi")], CONTROLS) == Reply("ok")
    results = [m for m in model.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert [r.call_id for r in results] == ["a", "b"] and all(r.is_error for r in results)
    assert "no tool named 'search_web'" in results[0].content


async def test_last_of_several_final_replies_counts() -> None:
    """Repeated final_reply in one step: the last one is the answer."""
    calls = tuple(
        ToolCall.from_raw(f"c{n}", "final_reply", f'{{"text": "draft {n}"}}') for n in range(3)
    )
    model = scripted(ModelResponse("", calls, "tool_calls", Usage(), "m"))
    assert await run_round(model, [UserMessage("hi")], CONTROLS) == Reply("draft 2")


async def test_repairs_are_bounded() -> None:
    """After max_repairs rejected answers the round fails with RoundFailed."""
    model = FunctionModel(lambda request: text_response("never a tool call"))
    with pytest.raises(RoundFailed):
        await run_round(model, [UserMessage("hi")], CONTROLS, RoundSettings(max_repairs=2))
    assert len(model.requests) == 3


def test_requests_are_immutable_snapshots() -> None:
    """A request records the conversation as it was when asked."""
    request = ModelRequest((UserMessage("a"),))
    assert request.messages == (UserMessage("a"),)


def cut(response: ModelResponse) -> ModelResponse:
    """The same answer, as a provider reports it when the output limit cut it."""
    return ModelResponse(
        response.text, response.tool_calls, "length", response.usage, response.model
    )


async def test_an_answer_cut_by_the_output_limit_is_never_the_decision() -> None:
    """A final_reply cut at the output limit is repaired with a request for a shorter one,
    even when what arrived happens to parse."""
    model = scripted(
        cut(tool_response("final_reply", {"text": "The first half of a long ans"}, call_id="c1")),
        tool_response("final_reply", {"text": "Short answer."}),
    )
    settings = RoundSettings(max_output_tokens=256)
    assert await run_round(model, [UserMessage("hi")], CONTROLS, settings) == Reply("Short answer.")
    feedback = model.requests[1].messages[-1]
    assert isinstance(feedback, ToolResultMessage) and feedback.is_error
    assert (
        feedback.call_id == "c1" and "cut off at the output limit (256 tokens)" in feedback.content
    )
    assert "shorter answer" in feedback.content


async def test_cut_prose_gets_the_same_note() -> None:
    """Text cut before any tool call was made is told the same, as a runtime note."""
    model = scripted(
        cut(text_response("Let me expla")), tool_response("final_reply", {"text": "ok"})
    )
    assert await run_round(model, [UserMessage("hi")], CONTROLS) == Reply("ok")
    note = model.requests[1].messages[-1]
    assert isinstance(note, UserMessage) and "cut off at the output limit" in note.text


async def test_cut_answers_count_as_repairs() -> None:
    """A model that is cut every time fails the round after the repair bound."""
    answer = cut(tool_response("final_reply", {"text": "x"}))
    model = FunctionModel(lambda request: answer)
    with pytest.raises(RoundFailed):
        await run_round(model, [UserMessage("hi")], CONTROLS, RoundSettings(max_repairs=2))
    assert len(model.requests) == 3
