"""A reply shown while it is written: only a final reply shows, and only once it is one.

The model here streams its answer in small fragments (`Fragmented`), the way providers
do, so the draft sees the reply grow; `MemoryDraft` records every append and discard.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent.core.errors import TransientModelError
from agent.core.ports import Showing, Task
from agent.durable.responder import ModelResponder, ResponderPorts
from agent.models.contract import (
    Finish,
    MessageStart,
    Model,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    ToolCall,
    ToolCallDelta,
    ToolCallStart,
    Usage,
    UserMessage,
    Watch,
)
from agent.models.function_model import text_response, tool_response
from agent.models.ladder import AttemptLadder, RetryPolicy
from agent.rounds.control import FinalReply, Reply
from agent.rounds.live_reply import ReplyTap
from agent.rounds.loop import run_round
from agent.rounds.settings import RoundSettings
from agent.rounds.subagent import AgentSubtask
from agent.rounds.subtask_types import SubtaskRegistry
from agent.rounds.tools import builtin_tools
from tests.agent.memory import DISCARDED, MemoryDraft, MemoryLiveView

CONTROLS = (FinalReply(),)
TASK = Task("t1", "s1", {"channel": "D1", "thread_ts": "1.0"})


class Fragmented(Model):
    """Answers from a script, each tool call's arguments told in `size`-character pieces.
    A script entry that is an exception is raised after the events before it were told."""

    def __init__(self, *script: ModelResponse | Exception, size: int = 3) -> None:
        self.name = "fragmented:test"
        self._script = list(script)
        self._size = size

    async def request(
        self,
        request: ModelRequest,
        *,
        watch: Watch | None = None,
        showing: Showing | None = None,
    ) -> ModelResponse:
        entry = self._script.pop(0)
        if isinstance(entry, Exception):
            if watch is not None:
                await watch(ToolCallStart(0, "x", "final_reply"))
                await watch(ToolCallDelta(0, '{"text": "half an ans'))
            raise entry
        if watch is not None:
            async for event in self._events(entry):
                await watch(event)
        return entry

    async def _events(self, response: ModelResponse) -> AsyncIterator[StreamEvent]:
        yield MessageStart(self.name)
        for index, call in enumerate(response.tool_calls):
            yield ToolCallStart(index, call.id, call.name)
            raw = call.raw_arguments
            for start in range(0, len(raw), self._size):
                yield ToolCallDelta(index, raw[start : start + self._size])
        yield Finish(response.finish_reason, response.usage)


def calls(*pairs: tuple[str, dict[str, Any]]) -> ModelResponse:
    made = tuple(
        ToolCall.from_raw(f"c{n}", name, json.dumps(args)) for n, (name, args) in enumerate(pairs)
    )
    return ModelResponse("", made, "tool_calls", Usage(), "fragmented:test")


async def test_a_final_reply_is_shown_as_it_is_written() -> None:
    draft = MemoryDraft()
    model = Fragmented(tool_response("final_reply", {"text": "Hello, *world*!\nBye."}))
    assert await run_round(model, [UserMessage("hi")], CONTROLS, draft=draft) == Reply(
        "Hello, *world*!\nBye."
    )
    assert len(draft.events) > 3  # it grew in pieces
    assert DISCARDED not in draft.events and draft.visible == "Hello, *world*!\nBye."


async def test_a_blank_final_reply_is_never_shown() -> None:
    draft = MemoryDraft()
    model = Fragmented(
        tool_response("final_reply", {"text": "  \n\t "}),
        tool_response("final_reply", {"text": "ok"}),
    )
    assert await run_round(model, [UserMessage("hi")], CONTROLS, draft=draft) == Reply("ok")
    assert draft.events == ["ok"]


async def test_blanks_at_the_ends_never_show_and_inner_ones_wait_for_what_follows() -> None:
    """The reply is stored trimmed, so the draft drops its leading blanks and shows a run
    of blanks only once text follows it: what shows is always the start of the reply."""
    draft = MemoryDraft()
    model = Fragmented(tool_response("final_reply", {"text": "\n\n  ok then \n"}), size=1)
    decision = await run_round(model, [UserMessage("hi")], CONTROLS, draft=draft)
    assert draft.events[:3] == ["o", "k", " t"] and draft.visible == "ok then"
    assert decision == Reply("ok then")


async def test_prose_is_never_shown() -> None:
    draft = MemoryDraft()
    model = Fragmented(
        text_response("thinking out loud"), tool_response("final_reply", {"text": "ok"})
    )
    await run_round(model, [UserMessage("hi")], CONTROLS, draft=draft)
    assert draft.events == ["ok"]


async def test_a_reply_written_beside_a_work_call_is_taken_back() -> None:
    """Work runs before control: the reply written with it was premised on nothing."""
    draft = MemoryDraft()
    model = Fragmented(
        calls(("final_reply", {"text": "guess"}), ("current_time", {})),
        tool_response("final_reply", {"text": "it is noon"}),
    )
    toolbox_round = await run_round(
        model,
        [UserMessage("time?")],
        CONTROLS,
        toolbox=_toolbox(),
        draft=draft,
    )
    assert toolbox_round == Reply("it is noon")
    assert DISCARDED in draft.events and draft.visible == "it is noon"
    assert "guess" in "".join(draft.events[: draft.events.index(DISCARDED)])


async def test_a_reply_the_output_limit_cut_is_taken_back() -> None:
    draft = MemoryDraft()
    cut = tool_response("final_reply", {"text": "a long answ"})
    cut = ModelResponse(cut.text, cut.tool_calls, "length", cut.usage, cut.model)
    model = Fragmented(cut, tool_response("final_reply", {"text": "short"}))
    await run_round(model, [UserMessage("hi")], CONTROLS, RoundSettings(), draft=draft)
    assert draft.visible == "short" and DISCARDED in draft.events


async def test_delegate_after_a_reply_began_ends_as_the_acknowledgment() -> None:
    """`delegate` outranks `final_reply`: the half answer shown is taken back, and the
    round's decision is the delegation (whose acknowledgment the runner posts)."""
    draft = MemoryDraft()
    live = MemoryLiveView()
    live.drafts[TASK.reply_id] = draft
    model = Fragmented(
        calls(
            ("final_reply", {"text": "Here is half an answer"}),
            (
                "delegate",
                {
                    "acknowledgment": "On it",
                    "subtasks": [{"type": "agent", "params": {"instructions": "look"}}],
                },
            ),
        )
    )
    decision = await _responder(model, live)(_round_input())
    assert not isinstance(decision, Reply) and decision.acknowledgment == "On it"
    assert "Here is half" in "".join(e for e in draft.events if e is not DISCARDED)
    assert draft.events[-1] is DISCARDED and draft.visible == ""


async def test_a_failed_attempt_takes_back_what_it_showed_and_the_retry_shows_anew() -> None:
    draft = MemoryDraft()
    live = MemoryLiveView()
    live.drafts[TASK.reply_id] = draft
    model = Fragmented(
        TransientModelError("stream cut"), tool_response("final_reply", {"text": "whole answer"})
    )
    decision = await _responder(model, live)(_round_input())
    assert decision == Reply("whole answer")
    assert draft.events[:2] == ["half an ans", DISCARDED] and draft.visible == "whole answer"


async def test_fragments_before_their_call_start_are_kept() -> None:
    """Some servers send a call's first argument fragment before its name."""
    draft = MemoryDraft()
    tap = ReplyTap(draft)
    await tap(ToolCallDelta(0, '{"text": "ea'))
    await tap(ToolCallStart(0, "c0", "final_reply"))
    await tap(ToolCallDelta(0, 'rly"}'))
    assert draft.visible == "early"


async def test_only_the_reply_tool_is_shown() -> None:
    draft = MemoryDraft()
    tap = ReplyTap(draft)
    await tap(ToolCallStart(0, "c0", "delegate"))
    await tap(ToolCallDelta(0, '{"text": "not a reply", "acknowledgment": "x"}'))
    await tap(ToolCallStart(1, "c1", "final_reply"))
    await tap(ToolCallDelta(1, '{"text": "the reply"}'))
    assert draft.visible == "the reply"


@given(st.text(min_size=1).filter(lambda t: t.strip()), st.integers(1, 7))
async def test_what_is_shown_is_the_reply(text: str, size: int) -> None:
    """Whatever the reply and however it is cut up, the draft shows exactly its text
    (made storable and trimmed, as the stored reply is): blanks at either end never show."""
    draft = MemoryDraft()
    model = Fragmented(tool_response("final_reply", {"text": text}), size=size)
    decision = await run_round(model, [UserMessage("hi")], CONTROLS, draft=draft)
    assert isinstance(decision, Reply) and draft.visible == decision.text


def _toolbox() -> Any:
    from agent.rounds.tools import Toolbox, ToolContext

    return Toolbox(builtin_tools(), ToolContext(TASK))


def _responder(model: Model, live: MemoryLiveView) -> ModelResponder:
    ladder = AttemptLadder([model], policy=RetryPolicy(attempts_per_slot=2), sleep=_no_sleep)
    return ModelResponder(
        ladder,
        tools=builtin_tools(),
        subtasks=SubtaskRegistry([AgentSubtask()]),
        ports=ResponderPorts(live=live),
    )


def _round_input() -> Any:
    from agent.core.delegation import RoundInput
    from agent.core.ports import StoredMessage

    turn = StoredMessage(TASK.user_message_id, TASK.session_id, "user", "turn", "question")
    return RoundInput(TASK, [turn])


async def _no_sleep(delay: float) -> None:
    return None
