"""FunctionModel: a scripted model for tests, with no HTTP and no timing."""

from __future__ import annotations

import pytest

from agent.core.errors import CredentialRejected
from agent.models.contract import Finish, ModelRequest, ModelResponse, TextDelta, UserMessage
from agent.models.function_model import FunctionModel, text_response, tool_response

REQUEST = ModelRequest((UserMessage("hi"),), tool_choice="required")


async def test_answers_from_a_plain_function_and_records_requests() -> None:
    """A sync function's answer is returned and the request is recorded."""
    model = FunctionModel(lambda request: tool_response("final_reply", {"text": "hey"}))
    response = await model.request(REQUEST)
    assert response.tool_calls[0].arguments == {"text": "hey"}
    assert model.requests == [REQUEST] and model.name == "function:test"


async def test_answers_from_an_async_function() -> None:
    """An async function is awaited."""

    async def answer(request: ModelRequest) -> ModelResponse:
        return text_response("async hello")

    assert (await FunctionModel(answer).request(REQUEST)).text == "async hello"


async def test_errors_raised_by_the_function_reach_the_caller() -> None:
    """An error the function raises is what the caller sees."""

    def refuse(request: ModelRequest) -> ModelResponse:
        raise CredentialRejected("refused", source="gateway")

    with pytest.raises(CredentialRejected):
        await FunctionModel(refuse, name="function:refuser").request(REQUEST)


async def test_stream_replays_the_answer_as_events() -> None:
    """The default stream turns the answer into text and finish events."""
    events = [e async for e in FunctionModel(lambda r: text_response("hi")).stream(REQUEST)]
    assert TextDelta("hi") in events and isinstance(events[-1], Finish)
