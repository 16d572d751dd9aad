"""Epochs in the agent (issue 35, item 1): a round is offered exactly what its session's
epoch says — the pinned prompt while the offer is the one it was pinned with, a new epoch
(new prompt and new offer together, never the old prompt beside the new offer) when it is
not — and a sub-agent is asked under the sub-agent prompt its session's epoch pinned,
recording that epoch for its result."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agent.core.delegation import RoundInput, Subtask, SubtaskRequest
from agent.core.ports import AnswerOrigin, PromptEpoch
from agent.durable.responder import ModelResponder, ResponderPorts
from agent.models.contract import ModelRequest, ModelResponse, SystemMessage
from agent.models.function_model import FunctionModel, tool_response
from agent.models.ladder import AttemptLadder
from agent.rounds.prompt import round_offer
from agent.rounds.subagent import SUBAGENT_PROMPT, builtin_subtask_types
from agent.rounds.tools import ToolContext, ToolRegistry, WorkTool, builtin_tools
from tests.agent.test_responder import TASK, WINDOW, _no_sleep


class SessionEpochs:
    """`agent.Memory` with storage's rule: the pinned epoch while it offers the same,
    else the current one begun (the reasons are storage's: tests/storage/test_epochs.py)."""

    def __init__(self, pinned: PromptEpoch | None = None) -> None:
        self.epochs = [pinned] if pinned else []
        self.subtask_stamps: list[tuple[str, int, int, int, str]] = []

    async def pin_prompt(self, session_id: str, current: PromptEpoch) -> PromptEpoch:
        if self.epochs and self.epochs[-1].offers_as(current):
            return self.epochs[-1]
        self.epochs.append(current)
        return current

    async def stamp(self, message_id: str, origin: AnswerOrigin) -> None:
        pass

    async def stamp_subtask(
        self, task_id: str, round_number: int, index: int, attempt: int, epoch: str
    ) -> None:
        self.subtask_stamps.append((task_id, round_number, index, attempt, epoch))


def recording(seen: list[ModelRequest]) -> FunctionModel:
    def answer(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return tool_response("final_reply", {"text": "ok"})

    return FunctionModel(answer)


def deployment(
    seen: list[ModelRequest], memory: SessionEpochs, tools: ToolRegistry | None = None
) -> ModelResponder:
    return ModelResponder(
        AttemptLadder([recording(seen)], sleep=_no_sleep),
        tools=tools if tools is not None else builtin_tools(),
        subtasks=builtin_subtask_types(),
        ports=ResponderPorts(memory=memory),
    )


def offer_hash(request: ModelRequest) -> str:
    return hashlib.sha256(round_offer(request.tools).encode()).hexdigest()


class SearchInput(BaseModel):
    query: str


class Search(WorkTool[SearchInput]):
    name = "search"
    description = "Search the wiki."
    input_model = SearchInput

    async def execute(self, context: ToolContext, input: SearchInput) -> str:
        return "nothing"


def with_search() -> ToolRegistry:
    return ToolRegistry([*builtin_tools(), Search()])


async def test_an_older_epoch_with_the_same_offer_keeps_its_words_and_its_offer() -> None:
    """A session pinned on an earlier deploy whose words differ but whose offer is the
    same: the round is asked under the old words and offered exactly the epoch's tools."""
    seen: list[ModelRequest] = []
    probe = deployment([], SessionEpochs())
    old = replace(probe.epoch_of(TASK), hash="old", text="The words of the old deploy.")
    memory = SessionEpochs(old)
    decision = await deployment(seen, memory)(RoundInput(TASK, WINDOW))
    assert seen[0].messages[0] == SystemMessage("The words of the old deploy.")
    assert [t.name for t in seen[0].tools] == list(old.tools)
    assert offer_hash(seen[0]) == old.offer_hash
    assert decision.origin is not None and decision.origin.prompt_epoch == "old"


async def test_a_changed_offer_begins_a_new_epoch_never_a_hybrid() -> None:
    """The next deploy adds a tool: the old session's next round is a new epoch, new words
    and new offer together; the old words are never shown beside the new tool."""
    before = deployment([], SessionEpochs()).epoch_of(TASK)
    old = replace(before, hash="old", text="The words of the old deploy.")
    memory = SessionEpochs(old)
    seen: list[ModelRequest] = []
    await deployment(seen, memory, with_search())(RoundInput(TASK, WINDOW))
    new = memory.epochs[-1]
    assert len(memory.epochs) == 2 and "search" in new.tools and "search" not in old.tools
    assert seen[0].messages[0] == SystemMessage(new.text) and new.text != old.text
    assert [t.name for t in seen[0].tools] == list(new.tools)
    assert offer_hash(seen[0]) == new.offer_hash


async def test_a_sub_agent_is_asked_under_its_sessions_pinned_prompt_and_records_it() -> None:
    """A session whose epoch pinned an older sub-agent prompt: its subtask's sub-agent is
    asked under that prompt, and the subtask records the epoch with its attempt."""
    probe = deployment([], SessionEpochs()).epoch_of(TASK)
    assert probe.subagent_prompt("agent") == SUBAGENT_PROMPT
    old = replace(probe, hash="old", subagents=(("agent", "You are the old helper."),))
    memory = SessionEpochs(old)
    seen: list[ModelRequest] = []
    subtask = Subtask(TASK.id, 1, 0, SubtaskRequest("agent", {"instructions": "look"}), 3)
    assert await deployment(seen, memory).run_subtask(subtask, TASK) == "ok"
    assert seen[0].messages[0] == SystemMessage("You are the old helper.")
    assert memory.subtask_stamps == [(TASK.id, 1, 0, 3, "old")]


async def test_a_sub_agent_after_a_changed_offer_is_asked_under_the_new_epoch() -> None:
    """A subtask that runs after the offer changed begins the new epoch and its sub-agent
    gets that epoch's prompt (the deployment's), with the new tool."""
    old = replace(
        deployment([], SessionEpochs()).epoch_of(TASK),
        hash="old",
        subagents=(("agent", "You are the old helper."),),
    )
    memory = SessionEpochs(old)
    seen: list[ModelRequest] = []
    subtask = Subtask(TASK.id, 0, 0, SubtaskRequest("agent", {"instructions": "look"}))
    await deployment(seen, memory, with_search()).run_subtask(subtask, TASK)
    assert seen[0].messages[0] == SystemMessage(SUBAGENT_PROMPT)
    assert "search" in [t.name for t in seen[0].tools]
    assert memory.subtask_stamps[0][-1] == memory.epochs[-1].hash != "old"


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=4))
async def test_whatever_the_tools_say_the_request_offers_what_the_epoch_says(
    descriptions: list[str],
) -> None:
    """For any tool descriptions, the epoch a round is asked under hashes exactly the
    tools its request carries, in their order."""

    def tool(n: int, text: str) -> WorkTool[SearchInput]:
        return type(f"Tool{n}", (Search,), {"name": f"tool_{n}", "description": text})()

    tools = ToolRegistry([tool(n, text) for n, text in enumerate(descriptions)])
    memory = SessionEpochs()
    seen: list[ModelRequest] = []
    await deployment(seen, memory, tools)(RoundInput(TASK, WINDOW))
    (epoch,) = memory.epochs
    assert offer_hash(seen[0]) == epoch.offer_hash
    assert tuple(t.name for t in seen[0].tools) == epoch.tools


async def test_a_schedules_run_is_offered_what_its_epoch_says_no_reply_included() -> None:
    """A schedule's run is offered `no_reply` beside the other controls; its epoch records
    that offer, so the request and the epoch agree there too."""
    run = replace(TASK, schedule_id="7")
    memory = SessionEpochs()
    seen: list[ModelRequest] = []
    await deployment(seen, memory)(RoundInput(run, WINDOW))
    (epoch,) = memory.epochs
    assert "no_reply" in [t.name for t in seen[0].tools]
    assert offer_hash(seen[0]) == epoch.offer_hash
    assert tuple(t.name for t in seen[0].tools) == epoch.tools
