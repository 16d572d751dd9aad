"""final_reply's citations: only what the model was shown may be cited (issue 12, item 6)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from agent.core.citations import Citation
from agent.core.errors import ControlCallError
from agent.core.ports import StoredMessage, Task
from agent.models.contract import ToolResultMessage, UserMessage
from agent.models.function_model import tool_response
from agent.rounds.citations import Citable
from agent.rounds.control import FinalReply, Reply
from agent.rounds.loop import run_round
from agent.rounds.references import ReferenceCatalog
from agent.rounds.tools import Toolbox, ToolContext, ToolRegistry, WorkTool
from tests.agent.memory import MemoryDraft
from tests.agent.test_live_reply import Fragmented, calls
from tests.agent.test_loop import scripted

TASK = Task("t1", "s1", {"channel": "D1", "thread_ts": "1.0"})
WINDOW = (
    StoredMessage(
        "task:T:C:1.0:user", "s1", "user", "turn", "see https://docs.example/a?x=1&amp;y=2."
    ),
    StoredMessage("task:T:C:1.0:reply", "s1", "assistant", "reply", "ok"),
)


def citable() -> Citable:
    seen = Citable(ReferenceCatalog.from_window(WINDOW))
    seen.note([UserMessage(m.text) for m in WINDOW])
    return seen


def test_a_ref_becomes_the_cited_message_id_and_a_shown_url_is_accepted() -> None:
    """[ref 1] is the window's first message; a URL from a turn is citable, unescaped and
    without the sentence's full stop."""
    reply = FinalReply(citable()).parse(
        tool_response(
            "final_reply",
            {"text": "yes", "citations": [{"ref": 1}, {"url": "https://docs.example/a?x=1&y=2"}]},
        ).tool_calls[0]
    )
    assert reply == Reply(
        "yes",
        (Citation(message_id="task:T:C:1.0:user"), Citation(url="https://docs.example/a?x=1&y=2")),
    )


async def test_what_was_not_shown_is_refused_with_what_may_be_cited() -> None:
    """A made-up URL or a ref past the window is refused; the message lists the choices,
    and the round goes on to the valid reply."""
    model = scripted(
        tool_response("final_reply", {"text": "a", "citations": [{"url": "https://made.up/x"}]}),
        tool_response("final_reply", {"text": "b", "citations": [{"ref": 9}]}),
        tool_response("final_reply", {"text": "c", "citations": [{"ref": 2}]}),
    )
    seen = citable()
    decision = await run_round(
        model, [UserMessage(WINDOW[0].text)], (FinalReply(seen),), citable=seen
    )
    assert decision == Reply("c", (Citation(message_id="task:T:C:1.0:reply"),))
    first, second = (r.messages[-1] for r in model.requests[1:3])
    assert isinstance(first, ToolResultMessage) and first.is_error
    assert "'https://made.up/x' did not appear" in first.content
    assert "https://docs.example/a?x=1&y=2" in first.content and "1, 2" in first.content
    assert isinstance(second, ToolResultMessage) and "[ref 9]" in second.content


def test_a_citation_needs_exactly_one_of_ref_and_url() -> None:
    """{} and {"ref", "url"} together are refused."""
    for bad in ({}, {"ref": 1, "url": "https://docs.example/a"}):
        call = tool_response("final_reply", {"text": "x", "citations": [bad]}).tool_calls[0]
        with pytest.raises(ControlCallError, match="exactly one"):
            FinalReply(citable()).parse(call)


class _Empty(BaseModel):
    pass


class Search(WorkTool[_Empty]):
    name = "search"
    description = "finds pages"
    input_model = _Empty

    async def execute(self, context: ToolContext, input: _Empty) -> str:
        return "found (https://found.example/page) and more"


def test_urls_noted_after_a_citation_was_checked_are_citable_too() -> None:
    """The texts are read for URLs when a citation asks: what is noted after that (a tool's
    output later in the round) is read at the next one."""
    seen = citable()
    assert seen.resolve([None], ["https://docs.example/a?x=1&y=2"])
    with pytest.raises(ControlCallError):
        seen.resolve([None], ["https://later.example/x"])
    seen.note([ToolResultMessage("c1", "search", "found https://later.example/x.")])
    assert seen.resolve([None], ["https://later.example/x"])


async def test_a_url_from_a_tool_output_this_round_may_be_cited() -> None:
    """The loop notes what work tools returned; their URLs become citable."""
    model = scripted(
        tool_response("search", {}),
        tool_response(
            "final_reply", {"text": "here", "citations": [{"url": "https://found.example/page"}]}
        ),
    )
    seen = Citable()
    toolbox = Toolbox(ToolRegistry([Search()]), ToolContext(TASK))
    decision = await run_round(
        model, [UserMessage("q")], (FinalReply(seen),), toolbox=toolbox, citable=seen
    )
    assert decision == Reply("here", (Citation(url="https://found.example/page"),))


@given(
    before=st.booleans(),
    text=st.text(max_size=40).filter(str.strip),
    size=st.integers(1, 7),
)
async def test_the_streamed_text_ignores_citations_before_or_after_it(
    before: bool, text: str, size: int
) -> None:
    """Whichever side of `text` the citations are written on, the draft shows the text."""
    citations = [{"ref": 1}, {"url": "https://docs.example/a?x=1&y=2"}]
    arguments = (
        {"citations": citations, "text": text} if before else {"text": text, "citations": citations}
    )
    draft = MemoryDraft()
    model = Fragmented(calls(("final_reply", arguments)), size=size)
    seen = citable()
    decision = await run_round(
        model, [UserMessage("hi")], (FinalReply(seen),), draft=draft, citable=seen
    )
    assert isinstance(decision, Reply) and len(decision.citations) == 2
    assert draft.visible == decision.text
