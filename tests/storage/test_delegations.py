"""Delegation storage: idempotent rounds, leased subtasks, and the hand-back to the task."""

from __future__ import annotations

import asyncio
import dataclasses

from agent import Delegation, SubtaskRequest, Task
from storage import (
    Admission,
    Database,
    PostgresDelegations,
    PostgresHistory,
    PostgresTaskQueue,
    admit,
)


def delegation(ack: str = "On it", count: int = 2) -> Delegation:
    subtasks = tuple(
        SubtaskRequest("agent", {"instructions": f"part {n}"}, (f"ref {n}",)) for n in range(count)
    )
    return Delegation(ack, subtasks, "call_1", '{"acknowledgment": "On it"}')


async def running_task(db: Database) -> Task:
    await admit(
        db,
        Admission(
            None, "T1:C1:1.0", "T1:C1:1.0", {"channel": "C1", "thread_ts": "1.0"}, "question"
        ),
    )
    task = await PostgresTaskQueue(db).claim()
    assert task is not None
    return task


async def test_recording_twice_keeps_the_first_delegation(fresh_db: Database) -> None:
    """A re-run that re-inferred another delegation gets the stored one back."""
    rounds, task = PostgresDelegations(fresh_db), await running_task(fresh_db)
    first = await rounds.record(task, 0, delegation("first ack"), timeout_seconds=60)
    second = await rounds.record(task, 0, delegation("second ack", count=3), timeout_seconds=60)
    assert first == second and first.acknowledgment == "first ack" and len(first.subtasks) == 2
    ack = await PostgresHistory(fresh_db).get(task.ack_id(0))
    assert ack is not None and (ack.kind, ack.text) == ("ack", "first ack")
    state = await rounds.load(task)
    assert state.pending == first and state.finished == () and state.next_round == 1


async def test_last_subtask_to_end_makes_the_waiting_task_runnable(fresh_db: Database) -> None:
    """The task waits while subtasks run, and is claimable again once all have ended."""
    rounds, queue, task = (
        PostgresDelegations(fresh_db),
        PostgresTaskQueue(fresh_db),
        await running_task(fresh_db),
    )
    await rounds.record(task, 0, delegation(), timeout_seconds=60)
    await rounds.await_subtasks(task)
    first, second = await rounds.claim_subtask(), await rounds.claim_subtask()
    assert first is not None and second is not None and first[0].index != second[0].index
    assert first[1].id == task.id and first[0].request.references == (f"ref {first[0].index}",)
    await rounds.settle_subtask(first[0], "done", "result A")
    assert await queue.claim() is None
    await rounds.settle_subtask(second[0], "failed", "it broke")
    resumed = await queue.claim()
    assert resumed is not None and resumed.id == task.id
    state = await rounds.load(resumed)
    assert state.pending is None and [o.state for o in state.finished[0].outcomes] == [
        "done",
        "failed",
    ]


async def test_subtasks_ending_before_the_task_waits_do_not_strand_it(fresh_db: Database) -> None:
    """If every subtask ended before `await_subtasks`, the task is queued at once."""
    rounds, queue, task = (
        PostgresDelegations(fresh_db),
        PostgresTaskQueue(fresh_db),
        await running_task(fresh_db),
    )
    await rounds.record(task, 0, delegation(count=1), timeout_seconds=60)
    claimed = await rounds.claim_subtask()
    assert claimed is not None
    await rounds.settle_subtask(claimed[0], "done", "quick")
    await rounds.await_subtasks(task)
    resumed = await queue.claim()
    assert resumed is not None and resumed.id == task.id


async def test_overdue_subtasks_time_out_and_wake_the_task(fresh_db: Database) -> None:
    """A subtask past its deadline ends as timed_out and the task runs its next round."""
    rounds, queue, task = (
        PostgresDelegations(fresh_db),
        PostgresTaskQueue(fresh_db),
        await running_task(fresh_db),
    )
    await rounds.record(task, 0, delegation(count=1), timeout_seconds=0)
    await rounds.await_subtasks(task)
    assert await rounds.claim_subtask() is None
    resumed = await queue.claim()
    assert resumed is not None
    outcome = (await rounds.load(resumed)).finished[0].outcomes[0]
    assert outcome.state == "timed_out" and "deadline" in outcome.text


async def waiting_beside(
    db: Database, other: Admission
) -> tuple[PostgresDelegations, PostgresTaskQueue, Task]:
    """A task waiting for its one subtask, with `other` admitted after it."""
    rounds, queue, task = PostgresDelegations(db), PostgresTaskQueue(db), await running_task(db)
    await admit(db, other)
    await rounds.record(task, 0, delegation(count=1), timeout_seconds=60)
    await rounds.await_subtasks(task)
    return rounds, queue, task


async def test_a_waiting_task_blocks_later_tasks_of_its_thread(fresh_db: Database) -> None:
    """Per-thread order holds across delegation: the next message waits for the whole task."""
    _, queue, _ = await waiting_beside(
        fresh_db,
        Admission(None, "T1:C1:1.1", "T1:C1:1.0", {"channel": "C1", "thread_ts": "1.0"}, "next"),
    )
    assert await queue.claim() is None


async def test_a_look_for_work_takes_a_subtask_before_a_task(fresh_db: Database) -> None:
    """`claim_next` leases a runnable subtask (with its task) while a task is queued too,
    and the queued task once no subtask is left; each under its own lease."""
    rounds, queue, task = await waiting_beside(
        fresh_db,
        Admission(None, "T1:C2:2.0", "T1:C2:2.0", {"channel": "C2", "thread_ts": "2.0"}, "other"),
    )
    claimed = await rounds.claim_next(queue)
    assert isinstance(claimed, tuple)
    subtask, parent = claimed
    assert (subtask.task_id, subtask.round, subtask.index, subtask.attempts) == (task.id, 0, 0, 1)
    assert parent.id == task.id and parent.address == task.address
    assert subtask.request == delegation(count=1).subtasks[0] and subtask.timeout_seconds > 0
    assert await fresh_db.pool.fetchval("SELECT state FROM tasks WHERE id = 'T1:C2:2.0'") == (
        "queued"
    )
    following = await rounds.claim_next(queue)
    assert isinstance(following, Task) and following.id == "T1:C2:2.0"
    assert following.attempts == 1 and following.created_at is not None
    assert await rounds.claim_next(queue) is None
    assert await rounds.heartbeat_subtask(subtask) and await queue.heartbeat(following)
    await rounds.settle_subtask(subtask, "done", "found it")
    resumed = await rounds.claim_next(queue)
    assert isinstance(resumed, Task) and resumed.id == task.id and resumed.attempts == 2


async def test_the_last_two_subtasks_ending_at_once_wake_their_task(fresh_db: Database) -> None:
    """Settles of one task's subtasks serialise on the task row: whichever ends last sees
    the other's outcome and wakes the task; a settle by a superseded attempt changes
    nothing."""
    rounds, queue, task = (
        PostgresDelegations(fresh_db),
        PostgresTaskQueue(fresh_db),
        await running_task(fresh_db),
    )
    await rounds.record(task, 0, delegation(), timeout_seconds=60)
    await rounds.await_subtasks(task)
    first, second = await rounds.claim_subtask(), await rounds.claim_subtask()
    assert first is not None and second is not None
    stale = dataclasses.replace(first[0], attempts=first[0].attempts - 1)
    await rounds.settle_subtask(stale, "done", "from a superseded attempt")
    assert await queue.claim() is None
    await asyncio.gather(
        rounds.settle_subtask(first[0], "done", "A"), rounds.settle_subtask(second[0], "done", "B")
    )
    resumed = await queue.claim()
    assert resumed is not None and resumed.id == task.id
    outcomes = (await rounds.load(resumed)).finished[0].outcomes
    assert [(o.state, o.text) for o in outcomes] == [("done", "A"), ("done", "B")]


async def test_a_subtask_found_first_leaves_the_look_for_dead_tasks_due(
    fresh_db: Database,
) -> None:
    """A claim of work that found a subtask never ran its task arm, so its look for dead
    task leases did not happen either: the next claim looks, with the clock unmoved (a
    steady flow of subtasks would otherwise starve the take-over of a crashed task)."""
    rounds, task = PostgresDelegations(fresh_db), await running_task(fresh_db)
    await rounds.record(task, 0, delegation(count=1), timeout_seconds=60)
    await rounds.await_subtasks(task)
    await admit(
        fresh_db,
        Admission(None, "T1:C1:2.0", "T1:C1:2.0", {"channel": "C1", "thread_ts": "2.0"}, "q"),
    )
    async with Database(fresh_db._dsn) as doomed:
        crashed = await PostgresTaskQueue(doomed).claim()
        assert crashed is not None and crashed.id == "T1:C1:2.0"
    frozen = 1000.0
    tasks = PostgresTaskQueue(fresh_db, clock=lambda: frozen)
    work = PostgresDelegations(fresh_db, clock=lambda: frozen)
    first = await work.claim_next(tasks)
    assert isinstance(first, tuple)  # the subtask, found before any task
    second = await work.claim_next(tasks)
    assert isinstance(second, Task) and second.id == crashed.id and second.attempts == 2
