"""A schedule's run in the agent: `no_reply` is offered only there and ends the round in
silence (nothing posted, the task done), anything that posts outranks it, the runner
counts each run's outcome; and people's schedule tools act for the person who asked."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from agent import (
    Reply,
    RunnerPorts,
    ScheduleBook,
    ScheduleEntry,
    ScheduleRefused,
    ScheduleRequest,
    Silence,
    Task,
    TaskRunner,
    Toolbox,
    ToolContext,
    ToolRegistry,
    round_controls,
    run_round,
    schedule_tools,
)
from agent.core.delegation import RoundInput
from agent.core.errors import RoundFailed
from agent.core.ports import StoredMessage
from agent.durable.responder import ModelResponder, ResponderPorts
from agent.models.contract import ModelRequest, ModelResponse, UserMessage
from agent.models.function_model import FunctionModel, tool_response
from agent.models.ladder import AttemptLadder
from agent.rounds.references import ReferenceCatalog
from agent.rounds.subtask_types import SubtaskRegistry
from tests.agent.test_approval_rounds import Deploy, Look, MemoryApprovals
from tests.agent.test_control import REGISTRY, call, scripted, step
from tests.agent.test_runner import TASK, Agent, Rig, raising

CATALOG = ReferenceCatalog.from_window(())
RUN = dataclasses.replace(TASK, schedule_id="7")


def names(silent: bool, *, final: bool = False) -> list[str]:
    controls = round_controls(final=final, subtasks=REGISTRY, catalog=CATALOG, silent=silent)
    return [c.spec.name for c in controls]


def test_no_reply_is_offered_only_where_a_round_may_end_silent() -> None:
    """A schedule's rounds offer no_reply after the controls that post; others do not."""
    assert names(silent=True) == ["delegate", "final_reply", "no_reply"]
    assert names(silent=True, final=True) == ["final_reply", "no_reply"]
    assert "no_reply" not in names(silent=False)


async def test_no_reply_ends_the_round_in_silence_with_its_reason() -> None:
    """The call becomes `Silence`, its reason kept for the log."""
    controls = round_controls(final=True, subtasks=SubtaskRegistry(), catalog=CATALOG, silent=True)
    model = scripted(step(call("no_reply", {"reason": "quiet day"})))
    assert await run_round(model, [UserMessage("hi")], controls) == Silence("quiet day")


async def test_a_reply_outranks_no_reply_in_the_same_step() -> None:
    """final_reply and no_reply in one step: the reply is posted."""
    controls = round_controls(final=True, subtasks=SubtaskRegistry(), catalog=CATALOG, silent=True)
    model = scripted(step(call("no_reply", {}, "a"), call("final_reply", {"text": "news"}, "b")))
    decision = await run_round(model, [UserMessage("hi")], controls)
    assert isinstance(decision, Reply) and decision.text == "news"


async def test_no_reply_where_it_is_not_offered_is_repaired() -> None:
    """Outside a schedule's run no_reply is an unknown tool: the model is told, and a
    round that never ends properly fails."""
    controls = round_controls(final=True, subtasks=SubtaskRegistry(), catalog=CATALOG)
    model = scripted(*[step(call("no_reply", {}))] * 4)
    with pytest.raises(RoundFailed):
        await run_round(model, [UserMessage("hi")], controls)


class Outcomes:
    def __init__(self) -> None:
        self.runs: list[str] = []

    def task_settled(self, outcome: str) -> None:
        pass

    def round_decided(self, decision: str) -> None:
        pass

    def subtask_settled(self, state: str) -> None:
        pass

    def schedule_run_settled(self, outcome: str) -> None:
        self.runs.append(outcome)

    def reply_answered(self, messages: int) -> None:
        pass


async def run(task: Task, decide: Any) -> tuple[Rig, Outcomes]:
    """Run `task` on the runner tests' rig, its outcomes told to an observer."""
    rig, outcomes = Rig(Agent(decide)), Outcomes()
    runner = TaskRunner(
        RunnerPorts(
            queue=rig.queue,
            delegations=rig.delegations,
            history=rig.history,
            publisher=rig.publisher,
            alerts=rig.alerts,
            observer=outcomes,
        ),
        rig.agent,
    )
    await runner.run_task(task)
    return rig, outcomes


async def test_a_silent_run_posts_nothing_and_is_done() -> None:
    """Silence: no post, no reply stored, the task finished, counted `silent`."""
    rig, outcomes = await run(RUN, lambda r: Silence("nothing new"))
    assert rig.publisher.posts == [] and await rig.history.get(RUN.reply_id) is None
    assert rig.queue.finished == [RUN.id] and outcomes.runs == ["silent"]


async def test_each_run_is_counted_by_how_it_ended_and_a_persons_task_is_not() -> None:
    """A run's reply counts `posted`, its failure `failed`; a person's task counts neither."""
    _, posted = await run(RUN, lambda r: Reply("digest"))
    _, failed = await run(RUN, raising(RoundFailed("no")))
    _, person = await run(TASK, lambda r: Reply("answer"))
    assert (posted.runs, failed.runs, person.runs) == (["posted"], ["failed"], [])


class MemoryBook:
    """`agent.ScheduleBook` in memory, owners taken from the task's address."""

    minimum_seconds = 60

    def __init__(self) -> None:
        self.entries: dict[str, tuple[str, ScheduleRequest]] = {}

    async def create(self, task: Task, request: ScheduleRequest) -> ScheduleEntry:
        sid = str(len(self.entries) + 1)
        self.entries[sid] = (task.address["user"], request)
        return ScheduleEntry(
            sid, request.prompt, request.recurrence.describe(), request.where, "active"
        )

    async def mine(self, task: Task) -> Sequence[ScheduleEntry]:
        return [
            ScheduleEntry(sid, r.prompt, r.recurrence.describe(), r.where, "active")
            for sid, (owner, r) in self.entries.items()
            if owner == task.address["user"]
        ]

    async def delete(self, task: Task, schedule_id: str) -> bool:
        found = self.entries.get(schedule_id)
        if found is None or found[0] != task.address["user"]:
            return False
        del self.entries[schedule_id]
        return True


class MemoryDesk:
    """`agent.ScheduleDesk` in memory: who was asked about which schedule."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    async def confirm(self, task: Task, entry: ScheduleEntry) -> None:
        self.asked.append((task.id, entry.id))


def toolbox(
    book: ScheduleBook,
    task: Task,
    subtask_type: str | None = None,
    desk: MemoryDesk | None = None,
) -> Toolbox:
    tools = schedule_tools(book, desk or MemoryDesk())
    return Toolbox(ToolRegistry(tools), ToolContext(task, subtask_type=subtask_type))


ASKER = dataclasses.replace(TASK, address={**TASK.address, "team": "T1", "user": "U1"})
OTHER = dataclasses.replace(TASK, address={**TASK.address, "team": "T1", "user": "U2"})


async def test_a_schedule_made_by_asking_is_the_askers_alone() -> None:
    """schedule_create stores it for the person whose turn it is and asks them to approve
    it; another person's schedule_list shows none and schedule_delete refuses it."""
    book, desk = MemoryBook(), MemoryDesk()
    create = call(
        "schedule_create",
        {"prompt": "digest", "cron": "0 9 * * MON-FRI", "time_zone": "Europe/Berlin"},
    )
    [made] = await toolbox(book, ASKER, desk=desk).run([create])
    assert not made.is_error and "waiting for its owner's approval" in made.content
    assert "Schedule 1" in made.content
    assert book.entries["1"][0] == "U1" and desk.asked == [(ASKER.id, "1")]
    [listed] = await toolbox(book, OTHER).run([call("schedule_list", {})])
    assert listed.content == "This person has no schedules."
    [refused] = await toolbox(book, OTHER).run([call("schedule_delete", {"id": "1"})])
    assert "has no schedule '1'" in refused.content and "1" in book.entries
    [deleted] = await toolbox(book, ASKER).run([call("schedule_delete", {"id": "1"})])
    assert deleted.content.startswith("Deleted schedule 1") and book.entries == {}


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"prompt": "p", "every": "5s"}, "too often"),
        ({"prompt": "p", "cron": "61 * * * *"}, "bad minute"),
        ({"prompt": "p", "cron": "0 9 * * *", "time_zone": "Moon/Base"}, "not a time zone"),
        ({"prompt": "p", "every": "1h", "cron": "0 9 * * *"}, "exactly one of"),
        ({"prompt": "p"}, "exactly one of"),
    ],
)
async def test_a_schedule_asked_for_wrongly_is_a_failed_result_saying_why(
    arguments: dict[str, str], words: str
) -> None:
    """The model reads what was wrong and how to write it; nothing is stored."""
    book = MemoryBook()
    [result] = await toolbox(book, ASKER).run([call("schedule_create", arguments)])
    assert result.is_error and words in result.content and book.entries == {}


class FullBook(MemoryBook):
    """A book whose person has as many schedules as they may."""

    async def create(self, task: Task, request: ScheduleRequest) -> ScheduleEntry:
        raise ScheduleRefused("Not created: this person has 5 schedules, the most allowed.")


async def test_a_schedule_over_a_cap_is_a_failed_result_the_model_can_relay() -> None:
    """The book's refusal reaches the model as a failed call carrying its reason, and
    nobody is asked to approve anything."""
    desk = MemoryDesk()
    create = call("schedule_create", {"prompt": "p", "every": "1h"})
    [result] = await toolbox(FullBook(), ASKER, desk=desk).run([create])
    assert result.is_error and "this person has 5 schedules, the most allowed" in result.content
    assert desk.asked == []


def test_the_tools_are_not_offered_in_a_run_or_to_a_sub_agent() -> None:
    """A run speaks for its schedule, not a person; a sub-agent acts for nobody."""
    book = MemoryBook()
    assert toolbox(book, ASKER).names == {"schedule_create", "schedule_list", "schedule_delete"}
    run_task = dataclasses.replace(ASKER, schedule_id="7")
    assert toolbox(book, run_task).names == frozenset()
    assert toolbox(book, ASKER, subtask_type="agent").names == frozenset()


async def test_a_run_is_offered_no_reply_and_no_tool_that_waits_for_a_person() -> None:
    """The responder offers a schedule's run `no_reply` and withholds tools that need
    approval (nobody watches a run to approve them); a person's round the other way round."""
    offered: list[list[str]] = []

    def answer(request: ModelRequest) -> ModelResponse:
        offered.append([t.name for t in request.tools])
        return tool_response("final_reply", {"text": "ok"})

    responder = ModelResponder(
        AttemptLadder([FunctionModel(answer)]),
        tools=ToolRegistry([Deploy(), Look()]),
        ports=ResponderPorts(approvals=MemoryApprovals()),
    )
    window = [StoredMessage(TASK.user_message_id, TASK.session_id, "user", "turn", "hi")]
    await responder(RoundInput(RUN, window))
    await responder(RoundInput(TASK, window))
    run_tools, person_tools = offered
    assert "no_reply" in run_tools and "deploy" not in run_tools and "look" in run_tools
    assert "no_reply" not in person_tools and "deploy" in person_tools
