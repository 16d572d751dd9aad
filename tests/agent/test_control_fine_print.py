"""The control tools' fine print (issue 35, item 4): `final_reply` is stored trimmed, a key
the schema does not have is dropped while a wrong type is still refused, the model is
shown `final_reply` first (precedence unchanged), and a repair after several control
calls quotes the one that counted."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.core.errors import ControlCallError
from agent.core.text import storable_text
from agent.models.contract import (
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from agent.models.function_model import FunctionModel, tool_response
from agent.models.providers import anthropic_wire, openai_wire
from agent.rounds.citations import Citable
from agent.rounds.control import Delegate, FinalReply, Reply, declared, round_controls
from agent.rounds.loop import QUOTE_CHARS, offered, run_round
from agent.rounds.tools import Toolbox, ToolContext, builtin_tools
from tests.agent.test_control import ACK, CATALOG, REGISTRY, agent_subtask, call
from tests.agent.test_runner import TASK


def scripted(*responses: ModelResponse) -> FunctionModel:
    queue = list(responses)
    return FunctionModel(lambda request: queue.pop(0))


def step(*calls: ToolCall) -> ModelResponse:
    return ModelResponse("", calls, "tool_calls", Usage(), "m")


def results(request: ModelRequest) -> dict[str, str]:
    """The tool results the request carries, by call id."""
    return {m.call_id: m.content for m in request.messages if isinstance(m, ToolResultMessage)}


@given(st.text(alphabet=" \t\n\r\u3000\u2028"), st.text(min_size=1).filter(str.strip))
def test_a_reply_is_stored_trimmed(blanks: str, text: str) -> None:
    """Whatever blanks surround the answer, the reply is its text without them."""
    reply = FinalReply().parse(call("final_reply", {"text": f"{blanks}{text}{blanks}"}))
    assert reply.text == storable_text(text).strip() and reply.text == reply.text.strip()


def test_a_key_final_reply_does_not_have_is_dropped() -> None:
    """Extra keys, in the call and in a citation, cost no repair; the reply is read."""
    arguments = {"text": "ok", "tone": "warm", "citations": [{"ref": 1, "why": "said so"}]}
    reply = FinalReply(Citable(CATALOG)).parse(call("final_reply", arguments))
    assert reply.text == "ok" and [c.message_id for c in reply.citations] == ["m1"]


def test_a_key_delegate_does_not_have_is_dropped() -> None:
    """Extra keys in the delegate call and in a subtask are dropped; the delegation runs."""
    subtask = agent_subtask("dig", priority="high") | {"params": {"instructions": "dig", "x": 1}}
    arguments = {"acknowledgment": "On it", "subtasks": [subtask], "urgent": True}
    delegation = Delegate(REGISTRY, CATALOG).parse(call("delegate", arguments))
    assert [dict(s.params) for s in delegation.subtasks] == [{"instructions": "dig"}]


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("final_reply", {"text": 3, "extra": 1}),
        ("final_reply", {"text": "ok", "citations": [{"ref": "1"}]}),
        ("delegate", {"acknowledgment": 5, "subtasks": [agent_subtask()]}),
        ("delegate", {"acknowledgment": "ok", "subtasks": [agent_subtask(refs=["1"])], "x": 1}),
    ],
)
def test_a_value_of_the_wrong_type_is_still_refused(name: str, arguments: dict[str, Any]) -> None:
    """Leniency is for keys only: a wrong type is a ControlCallError for the model."""
    control = FinalReply() if name == "final_reply" else Delegate(REGISTRY, CATALOG)
    with pytest.raises(ControlCallError):
        control.parse(call(name, arguments))


def test_the_model_is_shown_final_reply_first_and_delegate_still_decides() -> None:
    """Declared: final_reply, delegate, then the work tools; precedence is unchanged."""
    controls = round_controls(final=False, subtasks=REGISTRY, catalog=CATALOG)
    assert [c.spec.name for c in controls] == ["delegate", "final_reply"]
    assert [s.name for s in declared(controls)] == ["final_reply", "delegate"]
    toolbox = Toolbox(builtin_tools(), ToolContext(TASK))
    assert [s.name for s in offered(controls, toolbox)][:3] == [
        "final_reply",
        "delegate",
        "current_time",
    ]


async def test_both_wire_formats_keep_the_declared_order() -> None:
    """A round's request, written as OpenAI and as Anthropic JSON, lists final_reply first;
    a step calling both still delegates."""
    controls = round_controls(final=False, subtasks=REGISTRY, catalog=CATALOG)
    both = step(call("final_reply", {"text": "now"}, "a"), call("delegate", ACK, "b"))
    model = scripted(both)
    decision = await run_round(model, [UserMessage("hi")], controls)
    assert not isinstance(decision, Reply)
    request = model.requests[0]
    openai_body = openai_wire.build_body(request, "m", stream=False)
    anthropic_body = anthropic_wire.build_body(request, "m", stream=False)
    openai_names = [t["function"]["name"] for t in openai_body["tools"]]
    anthropic_names = [t["name"] for t in anthropic_body["tools"]]
    assert openai_names == anthropic_names == ["final_reply", "delegate"]


async def test_a_repair_after_several_final_replies_quotes_the_one_that_counted() -> None:
    """Two final_reply calls, the last one blank: its result says it counted and quotes it,
    the other's says which one counted; the model answers with the next call."""
    calls = (call("final_reply", {"text": "first"}, "a"), call("final_reply", {"text": " "}, "b"))
    model = scripted(step(*calls), tool_response("final_reply", {"text": "fixed"}))
    assert await run_round(model, [UserMessage("hi")], (FinalReply(),)) == Reply("fixed")
    fed = results(model.requests[1])
    quoted = 'final_reply with {"text": " "}'
    assert fed["b"].startswith(f"Of the 2 control calls in this step, this one counted: {quoted}.")
    assert "empty `text`" in fed["b"]
    assert quoted in fed["a"] and fed["a"].startswith("Not run:")


async def test_a_rejected_delegate_beside_a_final_reply_is_the_one_quoted() -> None:
    """delegate outranks final_reply: when it is refused, every control result quotes the
    delegate call, cut to a bounded length."""
    long_ack = {"acknowledgment": "x" * 1000, "subtasks": []}
    calls = (call("final_reply", {"text": "ok"}, "a"), call("delegate", long_ack, "b"))
    controls = round_controls(final=False, subtasks=REGISTRY, catalog=CATALOG)
    model = scripted(step(*calls), tool_response("final_reply", {"text": "fine"}))
    assert await run_round(model, [UserMessage("hi")], controls) == Reply("fine")
    fed = results(model.requests[1])
    assert "this one counted: delegate with " in fed["b"] and "`subtasks` has 0 items" in fed["b"]
    assert "only one counts, delegate with " in fed["a"]
    quote = fed["a"].split("only one counts, ", 1)[1]
    assert len(quote) < QUOTE_CHARS + 200 and "…" in quote


async def test_one_rejected_control_call_is_not_quoted() -> None:
    """A single control call's repair is its error alone, as before."""
    model = scripted(
        tool_response("final_reply", {"text": ""}, call_id="a"),
        tool_response("final_reply", {"text": "ok"}),
    )
    assert await run_round(model, [UserMessage("hi")], (FinalReply(),)) == Reply("ok")
    assert results(model.requests[1])["a"].startswith("final_reply was called with an empty")


async def test_the_quote_is_storable() -> None:
    """A quoted call's NUL is cleaned (a paused round's conversation is stored)."""
    calls = (
        call("final_reply", {"text": "a"}, "a"),
        call("final_reply", {"text": 3, "x": "\x00"}, "b"),
    )
    model = scripted(step(*calls), tool_response("final_reply", {"text": "ok"}))
    assert await run_round(model, [UserMessage("hi")], (FinalReply(),)) == Reply("ok")
    assert all("\x00" not in text for text in results(model.requests[1]).values())
