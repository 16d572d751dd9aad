"""Control tools: select, parse and precedence of final_reply and delegate (invariant 3)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from agent.core.delegation import Delegation, SubtaskRequest
from agent.core.errors import ControlCallError
from agent.core.ports import StoredMessage
from agent.core.text import storable_text
from agent.models.contract import ModelResponse, ToolCall, ToolResultMessage, Usage, UserMessage
from agent.models.function_model import FunctionModel, tool_response
from agent.rounds.control import Delegate, FinalReply, Reply, round_controls
from agent.rounds.loop import run_round
from agent.rounds.references import ReferenceCatalog
from agent.rounds.subagent import AgentSubtask
from agent.rounds.subtask_types import SubtaskContext, SubtaskRegistry, SubtaskType

WINDOW = (
    StoredMessage("m1", "s", "user", "turn", "<turn>first</turn>"),
    StoredMessage("m2", "s", "assistant", "ack", "Looking into it…"),
    StoredMessage("m3", "s", "assistant", "reply", "an answer"),
    StoredMessage("m4", "s", "user", "turn", "<turn>second</turn>"),
)
CATALOG = ReferenceCatalog.from_window(WINDOW)


class LookupParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str
    limit: int = 5


class Lookup(SubtaskType[LookupParams]):
    name = "lookup"
    description = "Look something up."
    params = LookupParams

    async def run(
        self, context: SubtaskContext, params: LookupParams, references: tuple[str, ...]
    ) -> str:
        return params.query


REGISTRY = SubtaskRegistry([AgentSubtask(), Lookup()])


def delegate(max_subtasks: int = 4) -> Delegate:
    return Delegate(REGISTRY, CATALOG, max_subtasks=max_subtasks)


def call(name: str, arguments: Any, call_id: str = "c1") -> ToolCall:
    return ToolCall.from_raw(call_id, name, json.dumps(arguments))


def step(*calls: ToolCall) -> ModelResponse:
    return ModelResponse("", calls, "tool_calls", Usage(), "m")


def scripted(*responses: ModelResponse) -> FunctionModel:
    queue = list(responses)
    return FunctionModel(lambda request: queue.pop(0))


def agent_subtask(instructions: str = "dig", **extra: Any) -> dict[str, Any]:
    return {"type": "agent", "params": {"instructions": instructions}, **extra}


ACK = {"acknowledgment": "Looking into it…", "subtasks": [agent_subtask()]}


def test_last_final_reply_is_selected() -> None:
    """Several final_reply calls in one step: select picks the last."""
    calls = [call("final_reply", {"text": str(n)}, f"c{n}") for n in range(3)]
    assert FinalReply().select(calls) is calls[-1]


def test_delegate_parses_into_a_delegation() -> None:
    """A valid call becomes a Delegation keeping its call id and raw arguments."""
    arguments = {
        "acknowledgment": "  On it  ",
        "subtasks": [agent_subtask(refs=[3, 1]), {"type": "lookup", "params": {"query": "q"}}],
    }
    made = call("delegate", arguments)
    assert delegate().parse(made) == Delegation(
        "On it",
        (
            SubtaskRequest(
                "agent", {"instructions": "dig"}, ("<turn>second</turn>", "<turn>first</turn>")
            ),
            SubtaskRequest("lookup", {"query": "q", "limit": 5}, ()),
        ),
        "c1",
        made.raw_arguments,
    )


async def test_delegate_beats_final_reply_in_the_same_step() -> None:
    """delegate outranks final_reply whichever comes first in the step."""
    controls = round_controls(final=False, subtasks=REGISTRY, catalog=CATALOG)
    model = scripted(step(call("final_reply", {"text": "done"}, "a"), call("delegate", ACK, "b")))
    decision = await run_round(model, [UserMessage("hi")], controls)
    assert isinstance(decision, Delegation) and decision.call_id == "b"


async def test_two_delegates_in_one_step_are_refused() -> None:
    """Two delegate calls in one step: neither runs, both are told to call once."""
    controls = round_controls(final=False, subtasks=REGISTRY, catalog=CATALOG)
    model = scripted(
        step(call("delegate", ACK, "a"), call("delegate", ACK, "b")),
        tool_response("delegate", ACK, call_id="c"),
    )
    decision = await run_round(model, [UserMessage("hi")], controls)
    assert isinstance(decision, Delegation) and decision.call_id == "c"
    results = [m for m in model.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert [r.call_id for r in results] == ["a", "b"] and all(r.is_error for r in results)
    assert "called 2 times in one step" in results[0].content


def test_select_refuses_duplicates_with_a_message_for_the_model() -> None:
    """select raises ControlCallError that says to put every subtask in one call."""
    with pytest.raises(ControlCallError, match="Call delegate once"):
        delegate().select([call("delegate", ACK, "a"), call("delegate", ACK, "b")])


@pytest.mark.parametrize("acknowledgment", ["", "   ", "\n\t"])
def test_blank_acknowledgment_is_rejected(acknowledgment: str) -> None:
    """The thread must see something: a blank acknowledgment is refused."""
    arguments = {"acknowledgment": acknowledgment, "subtasks": [agent_subtask()]}
    with pytest.raises(ControlCallError, match="`acknowledgment` is empty"):
        delegate().parse(call("delegate", arguments))


def test_unknown_subtask_type_lists_the_known_ones() -> None:
    """An unknown type is refused with the registered type names."""
    arguments = {"acknowledgment": "ok", "subtasks": [{"type": "web", "params": {}}]}
    with pytest.raises(
        ControlCallError,
        match=r"subtasks\[0\]\.type 'web' is unknown \(use one of: agent, lookup\)",
    ):
        delegate().parse(call("delegate", arguments))


@pytest.mark.parametrize(
    "params", [{}, {"query": 3}, {"query": "q", "extra": True}, {"query": "q", "limit": "many"}]
)
def test_bad_params_are_validated_by_the_type(params: dict[str, Any]) -> None:
    """Params are checked against the subtask type's own model, with the location."""
    arguments = {"acknowledgment": "ok", "subtasks": [{"type": "lookup", "params": params}]}
    with pytest.raises(ControlCallError, match=r"subtasks\[0\]\.params"):
        delegate().parse(call("delegate", arguments))


@pytest.mark.parametrize("count", [0, 3])
def test_subtask_count_is_bounded(count: int) -> None:
    """Zero subtasks or more than max_subtasks is refused, naming the bound."""
    arguments = {"acknowledgment": "ok", "subtasks": [agent_subtask()] * count}
    with pytest.raises(ControlCallError, match=f"has {count} items; give 1 to 2"):
        delegate(max_subtasks=2).parse(call("delegate", arguments))


def test_every_problem_is_reported_at_once() -> None:
    """Problems in several subtasks come back in one message, each with its location."""
    arguments = {
        "acknowledgment": "ok",
        "subtasks": [{"type": "nope", "params": {}}, agent_subtask(""), agent_subtask(refs=[9])],
    }
    with pytest.raises(ControlCallError) as caught:
        delegate().parse(call("delegate", arguments))
    assert all(f"subtasks[{n}]" in str(caught.value) for n in range(3))


@pytest.mark.parametrize("refs", [["1"], [1.5], "1", [True]])
def test_refs_must_be_integers(refs: object) -> None:
    """refs are strictly a list of integers."""
    arguments = {"acknowledgment": "ok", "subtasks": [agent_subtask(refs=refs)]}
    with pytest.raises(ControlCallError, match="refs"):
        delegate().parse(call("delegate", arguments))


async def test_unknown_ref_is_repaired_with_the_valid_numbers() -> None:
    """An unknown [ref N] is fed back listing the numbers the model may cite."""
    controls = round_controls(final=False, subtasks=REGISTRY, catalog=CATALOG)
    bad = {"acknowledgment": "ok", "subtasks": [agent_subtask(refs=[7])]}
    model = scripted(tool_response("delegate", bad), tool_response("delegate", ACK))
    assert isinstance(await run_round(model, [UserMessage("hi")], controls), Delegation)
    feedback = model.requests[1].messages[-1]
    assert isinstance(feedback, ToolResultMessage) and feedback.is_error
    assert "[ref 7] does not exist" in feedback.content
    assert "the valid numbers are 1, 2, 3" in feedback.content


def test_arguments_that_are_not_an_object_are_rejected() -> None:
    """Non-JSON or non-object arguments get a message that shows the right shape."""
    broken = ToolCall.from_raw("c1", "delegate", '["a"]')
    with pytest.raises(ControlCallError, match=r"not a JSON object.*Call delegate once"):
        delegate().parse(broken)


def test_controls_are_offered_in_precedence_order() -> None:
    """A normal round offers delegate first, then final_reply."""
    controls = round_controls(final=False, subtasks=REGISTRY, catalog=CATALOG)
    assert [c.spec.name for c in controls] == ["delegate", "final_reply"]


def test_final_round_and_empty_registry_offer_no_delegate() -> None:
    """The last round, or a deployment without subtask types, offers only final_reply."""
    final = round_controls(final=True, subtasks=REGISTRY, catalog=CATALOG)
    empty = round_controls(final=False, subtasks=SubtaskRegistry(), catalog=CATALOG)
    assert [c.spec.name for c in final] == [c.spec.name for c in empty] == ["final_reply"]


async def test_delegate_in_a_final_round_is_an_unknown_tool() -> None:
    """In the last round a delegate call is repaired like any tool that is not offered."""
    controls = round_controls(final=True, subtasks=REGISTRY, catalog=CATALOG)
    model = scripted(tool_response("delegate", ACK), tool_response("final_reply", {"text": "ok"}))
    assert await run_round(model, [UserMessage("hi")], controls) == Reply("ok")
    assert "no tool named 'delegate'" in model.requests[1].messages[-1].content  # type: ignore[union-attr]


def test_delegate_needs_a_subtask_type() -> None:
    """Building delegate over an empty registry is a programming error."""
    with pytest.raises(ValueError, match="at least one"):
        Delegate(SubtaskRegistry(), CATALOG)


def test_schema_is_built_from_the_registry() -> None:
    """One anyOf variant per type, its params inlined, the count bounded, no $ref left."""
    parameters = delegate(max_subtasks=3).spec.parameters
    subtasks = parameters["properties"]["subtasks"]
    assert (subtasks["minItems"], subtasks["maxItems"]) == (1, 3)
    variants = subtasks["items"]["anyOf"]
    assert [v["properties"]["type"]["enum"] for v in variants] == [["agent"], ["lookup"]]
    assert variants[1]["properties"]["params"]["required"] == ["query"]
    assert parameters["required"] == ["acknowledgment", "subtasks"]
    assert parameters["type"] == "object" and "$ref" not in json.dumps(parameters)


def test_one_type_needs_no_any_of() -> None:
    """With a single type the items schema is that type's object."""
    only = Delegate(SubtaskRegistry([AgentSubtask()]), CATALOG)
    assert only.spec.parameters["properties"]["subtasks"]["items"]["properties"]["type"][
        "enum"
    ] == ["agent"]


@given(st.text().filter(str.strip))
def test_any_non_blank_acknowledgment_is_kept(text: str) -> None:
    """Whatever the model writes as acknowledgment reaches the Delegation, stripped (and
    storable: NUL and lone surrogates become U+FFFD)."""
    arguments = {"acknowledgment": text, "subtasks": [agent_subtask()]}
    acknowledgment = delegate().parse(call("delegate", arguments)).acknowledgment
    assert acknowledgment == storable_text(text).strip()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(st.dictionaries(st.sampled_from(["acknowledgment", "subtasks", "x"]), JSON))
def test_any_arguments_parse_or_are_rejected_for_the_model(arguments: dict[str, Any]) -> None:
    """No input crashes parse: it is a Delegation or a ControlCallError."""
    try:
        assert isinstance(delegate().parse(call("delegate", arguments)), Delegation)
    except ControlCallError as exc:
        assert "Call delegate once" in str(exc)


UNSTORABLE = st.text(alphabet=st.sampled_from(["a", " ", "\x00", "\ud800", "\udfff", "é", "👋"]))


@given(text=UNSTORABLE.filter(str.strip))
def test_a_reply_is_always_storable(text: str) -> None:
    """NUL and lone surrogates in final_reply (JSON's \\u0000 and \\ud800 decode to them)
    become U+FFFD: Postgres would refuse the reply, and the round would run again forever."""
    raw = json.dumps({"text": text})
    reply = FinalReply().parse(ToolCall.from_raw("c1", "final_reply", raw))
    assert "\x00" not in reply.text and not any("\ud800" <= ch <= "\udfff" for ch in reply.text)
    assert reply.text.count("\ufffd") >= text.count("\x00")


def test_a_delegation_is_always_storable() -> None:
    """The acknowledgment and every string in the params are cleaned the same way."""
    raw = json.dumps(
        {
            "acknowledgment": "On it\x00",
            "subtasks": [{"type": "agent", "params": {"instructions": "look \ud800 up\x00"}}],
        }
    )
    decision = delegate().parse(ToolCall.from_raw("c1", "delegate", raw))
    assert decision.acknowledgment == "On it\ufffd"
    assert decision.subtasks[0].params == {"instructions": "look \ufffd up\ufffd"}
