"""The runner while every model is down, with a store that marks waiting tasks: early
tries do not use up the planned ones, and a thread is told once per outage."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from agent.core.delegation import RoundInput
from agent.core.errors import ModelsUnavailable
from agent.core.ports import ModelWait, PromptEpoch, StoredMessage, Task
from agent.durable.notices import DEFAULT_NOTICES
from agent.durable.runner import RunnerPorts, RunnerSettings, TaskRunner
from agent.rounds.control import Decision
from tests.agent.memory import (
    MemoryAlerts,
    MemoryDelegations,
    MemoryHistory,
    MemoryPublisher,
    MemoryQueue,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TASK = Task("T1:C1:2.0", "T1:C1:1.0", {"channel": "C1", "thread_ts": "1.0"})
TURN = StoredMessage(TASK.user_message_id, TASK.session_id, "user", "turn", "question")


class Down:
    """An agent whose every round finds every model down."""

    async def __call__(self, round_input: RoundInput) -> Decision:
        raise ModelsUnavailable("every model slot is unavailable for now")

    async def pin_prompt(self, task: Task) -> PromptEpoch:
        return PromptEpoch("hash", "v-test", "You are the test agent.")

    async def run_subtask(self, subtask: object, task: Task) -> str:
        raise AssertionError("no subtasks here")


@dataclass
class MemoryWaits:
    """`ModelWaits` in memory: what the store would say, and what was asked of it."""

    wait: ModelWait = field(default_factory=ModelWait)
    deferred: dict[str, float] = field(default_factory=dict)
    told_by: list[str] = field(default_factory=list)

    async def standing(self, task: Task) -> ModelWait:
        return self.wait

    async def defer(self, task: Task, delay: float, reason: str) -> None:
        self.deferred[task.id] = delay

    async def told(self, task: Task) -> None:
        self.told_by.append(task.id)


def rig(waits: MemoryWaits, settings: RunnerSettings) -> tuple[TaskRunner, MemoryPublisher]:
    publisher = MemoryPublisher()
    runner = TaskRunner(
        RunnerPorts(
            queue=MemoryQueue([TASK]),
            delegations=MemoryDelegations(),
            history=MemoryHistory([(TASK.user_message_id, TURN)]),
            publisher=publisher,
            alerts=MemoryAlerts(),
            waits=waits,
        ),
        Down(),
        settings=settings,
        clock=lambda: NOW,
    )
    return runner, publisher


def aged(seconds: float, attempts: int) -> Task:
    return dataclasses.replace(TASK, attempts=attempts, created_at=NOW - timedelta(seconds=seconds))


async def test_early_tries_do_not_use_up_the_planned_ones() -> None:
    """A task at its last planned try gives up; the same task whose two latest tries were
    asked for early (a new message, a recovery) is deferred again instead."""
    settings = RunnerSettings(max_deferrals=3, still_trying_seconds=1000)
    counted = MemoryWaits()
    plain, told = rig(counted, settings)
    await plain.run_task(aged(20, attempts=3))
    assert counted.deferred == {} and told.posts == [(TASK.failure_id, DEFAULT_NOTICES.unavailable)]
    woken = MemoryWaits(ModelWait(early_tries=2))
    runner, publisher = rig(woken, settings)
    await runner.run_task(aged(20, attempts=3))
    assert TASK.id in woken.deferred and publisher.posts == []


async def test_early_tries_beyond_the_bound_count() -> None:
    """At most `max_deferrals` early tries are free: past them every try counts, so a
    thread's flood of messages cannot keep a task trying for ever."""
    settings = RunnerSettings(max_deferrals=3, still_trying_seconds=1000)
    waits = MemoryWaits(ModelWait(early_tries=50))
    runner, publisher = rig(waits, settings)
    await runner.run_task(aged(20, attempts=6))
    assert waits.deferred == {} and publisher.posts == [
        (TASK.failure_id, DEFAULT_NOTICES.unavailable)
    ]


async def test_a_thread_told_in_this_outage_hears_no_second_notice() -> None:
    """A task whose thread got the give-up notice after its message arrived posts neither
    the still-trying notice nor its own give-up notice, and marks nothing."""
    settings = RunnerSettings(max_deferrals=2, still_trying_seconds=0)
    waits = MemoryWaits(ModelWait(thread_told=True))
    runner, publisher = rig(waits, settings)
    await runner.run_task(aged(10, attempts=1))
    await runner.run_task(aged(20, attempts=2))
    assert TASK.id in waits.deferred and publisher.posts == [] and waits.told_by == []


async def test_a_give_up_notice_is_recorded_for_the_thread() -> None:
    """A task that tells its thread the models are unavailable records it, so the
    thread's later messages in this outage do not say it again."""
    settings = RunnerSettings(max_deferrals=1, still_trying_seconds=0)
    waits = MemoryWaits()
    runner, publisher = rig(waits, settings)
    await runner.run_task(aged(10, attempts=1))
    assert publisher.posts == [(TASK.failure_id, DEFAULT_NOTICES.unavailable)]
    assert waits.told_by == [TASK.id]
