"""Steering (agent/rounds/steering.py): a round takes the thread's new messages after a
work step, before its next model call, and its reply answers the newest of them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from agent.core.ports import StoredMessage
from agent.models.contract import ModelResponse, UserMessage
from agent.models.function_model import FunctionModel, tool_response
from agent.rounds.control import FinalReply, Reply
from agent.rounds.loop import run_round
from agent.rounds.steering import STEERED, Steer, steered_turn
from agent.rounds.tools import CurrentTime, Toolbox, ToolContext, ToolRegistry
from gateway.text.provenance import Turn, parse_turn, render_turn
from tests.agent.test_tools import NOON, TASK
from tests.agent.turn_reader import as_read

CONTROLS = (FinalReply(),)
AT = datetime(2026, 1, 1, tzinfo=UTC)
LATE = StoredMessage("task:t2:user", "s1", "user", "turn", '<turn from="U1">and staging</turn>')


def scripted(*responses: ModelResponse) -> FunctionModel:
    queue = list(responses)
    return FunctionModel(lambda request: queue.pop(0))


class Inbox:
    """The store's side: the late message once, then nothing."""

    def __init__(self, *waiting: StoredMessage) -> None:
        self.waiting = list(waiting)
        self.looks = 0

    async def take(self) -> Sequence[StoredMessage]:
        self.looks += 1
        taken, self.waiting = self.waiting, []
        return taken


def clock_tools() -> Toolbox:
    return Toolbox(ToolRegistry((CurrentTime(),)), ToolContext(TASK, None, lambda: NOON))


async def test_a_message_that_came_in_during_a_work_step_is_a_turn_of_the_next_request() -> None:
    """After the work step the late turn follows the results, marked as steered; the reply
    says it answers that turn."""
    inbox = Inbox(LATE)
    model = scripted(
        tool_response("current_time", {}, call_id="a"),
        tool_response("final_reply", {"text": "both"}),
    )
    steer = Steer(inbox.take)
    decision = await run_round(
        model, [UserMessage("check deploy")], CONTROLS, toolbox=clock_tools(), steer=steer
    )
    assert decision == Reply("both") and isinstance(decision, Reply)
    assert decision.steered == (LATE.id,)
    last = model.requests[1].messages[-1]
    assert isinstance(last, UserMessage)
    assert last.text.startswith(LATE.text) and STEERED.rendered() in last.text
    assert len(model.requests[0].messages) == 1


async def test_a_round_without_work_takes_nothing() -> None:
    """A round whose first answer is the reply never looks: what came in is the next
    task's."""
    inbox = Inbox(LATE)
    model = scripted(tool_response("final_reply", {"text": "one"}))
    decision = await run_round(model, [UserMessage("hi")], CONTROLS, steer=Steer(inbox.take))
    assert isinstance(decision, Reply) and decision.steered == ()
    assert inbox.looks == 0 and inbox.waiting == [LATE]


async def test_an_attempt_on_another_slot_starts_with_what_was_taken() -> None:
    """Taken turns are covered: a repeated attempt (the ladder's fallback) shows them too."""
    inbox = Inbox(LATE)
    steer = Steer(inbox.take)
    first = scripted(
        tool_response("current_time", {}, call_id="a"),
        tool_response("final_reply", {"text": "x"}),
    )
    await run_round(first, [UserMessage("hi")], CONTROLS, toolbox=clock_tools(), steer=steer)
    again = scripted(tool_response("final_reply", {"text": "y"}))
    decision = await run_round(
        again, [UserMessage("hi")], CONTROLS, toolbox=clock_tools(), steer=steer
    )
    assert isinstance(decision, Reply) and decision.steered == (LATE.id,)
    assert again.requests[0].messages[-1].text.startswith(LATE.text)  # type: ignore[union-attr]


@given(st.text())
def test_whatever_a_person_wrote_a_steered_turn_is_their_one_turn_then_the_note(body: str) -> None:
    """A taken turn keeps its one turn tag, with the person's words intact inside, and the
    steered note follows it, the only runtime tag a reader finds."""
    stored = render_turn(Turn("Ada", "U1", "C1", AT, body))
    text = steered_turn(StoredMessage("task:t2:user", "s1", "user", "turn", stored)).text
    turn, _, note = text.rpartition("\n")
    assert parse_turn(turn) == parse_turn(stored)
    assert note == STEERED.rendered()
    assert len(re.findall(r"</?runtime", as_read(text))) == 2
    assert len(re.findall(r"</?turn", as_read(text))) == 2
