"""A URL the bot wrote itself is no source: only what people wrote and what tools and
subtasks returned may be cited by URL (issue 37, item 8)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.core.citations import Citation
from agent.core.errors import ControlCallError
from agent.models.contract import AssistantMessage, ToolResultMessage, UserMessage
from agent.models.function_model import tool_response
from agent.rounds.citations import Citable
from agent.rounds.control import FinalReply, Reply
from agent.rounds.loop import run_round
from tests.agent.test_loop import scripted

MADE_UP = "https://made.up/claim"


def test_a_url_only_in_the_bots_own_reply_is_not_citable() -> None:
    """The window's reply of ours mentions a URL nobody else did: citing it is refused."""
    seen = Citable()
    seen.note([UserMessage("where is it?"), AssistantMessage(f"It is at {MADE_UP}.")])
    assert seen.urls == set()
    with pytest.raises(ControlCallError, match="did not appear in anything you read"):
        seen.resolve([None], [MADE_UP])


@given(st.sampled_from(["user", "tool"]))
def test_a_url_someone_else_also_showed_stays_citable(source: str) -> None:
    """The same URL in a person's turn or a tool's output is citable, whoever repeated it."""
    shown = (
        UserMessage(f"read {MADE_UP}")
        if source == "user"
        else ToolResultMessage("c1", "search", f"found {MADE_UP}")
    )
    seen = Citable()
    seen.note([AssistantMessage(f"see {MADE_UP}"), shown])
    assert seen.resolve([None], [MADE_UP]) == (Citation(url=MADE_UP),)


async def test_the_round_repairs_a_citation_of_its_own_words() -> None:
    """In a round, a citation of a URL from the bot's earlier reply goes back to the model
    as a failed call; its reply without it is the decision."""
    model = scripted(
        tool_response("final_reply", {"text": "a", "citations": [{"url": MADE_UP}]}),
        tool_response("final_reply", {"text": "b"}),
    )
    messages = [UserMessage("q"), AssistantMessage(f"earlier: {MADE_UP}"), UserMessage("and?")]
    seen = Citable()
    decision = await run_round(model, messages, (FinalReply(seen),), citable=seen)
    assert decision == Reply("b")
    feedback = model.requests[1].messages[-1]
    assert isinstance(feedback, ToolResultMessage) and feedback.is_error
    assert "no URL appeared in what you read" in feedback.content
