"""Operators on tasks: cancel and retry change one task in one locked transaction, safe
against the workers of any replica; list and show read everything stored about tasks."""

from __future__ import annotations

import asyncio

import pytest

from agent import Delegation, StoredMessage, SubtaskRequest, Task, ToolCallRecord
from storage import (
    Admission,
    Database,
    InterventionRefused,
    Outbox,
    PostgresDelegations,
    PostgresHistory,
    PostgresTaskQueue,
    PostgresToolCalls,
    Superseded,
    TaskFilter,
    UnknownTask,
    admit,
    cancel_task,
    inspect_task,
    list_tasks,
    retry_task,
)
from storage.queue import task_from_row

OPERATOR = "operator via threadgate tasks (test)"


@pytest.fixture
def db(fresh_db: Database) -> Database:
    """The storage tests' own migrated database (tests/storage/conftest.py), as `db`."""
    return fresh_db


async def queue_task(db: Database, ts: str, *, thread: str = "1.0", channel: str = "C1") -> str:
    """Admit a message in `thread` of `channel` (team T1); returns its task id."""
    task_id = f"T1:{channel}:{ts}"
    address = {"team": "T1", "channel": channel, "thread_ts": thread}
    session = f"T1:{channel}:{thread}"
    await admit(db, Admission(None, task_id, session, address, f"question {ts}"))
    return task_id


async def claim(db: Database) -> Task:
    task = await PostgresTaskQueue(db).claim()
    assert task is not None
    return task


async def state_of(db: Database, task_id: str) -> str:
    return str(await db.pool.fetchval("SELECT state FROM tasks WHERE id = $1", task_id))


async def test_cancelling_a_queued_task_frees_its_thread_and_is_recorded(db: Database) -> None:
    """The cancelled task is never claimed; the thread's next message is, and show says who."""
    first = await queue_task(db, "1.0")
    second = await queue_task(db, "2.0")
    done = await cancel_task(db, first, actor=OPERATOR, reason="spam")
    assert (done.from_state, await state_of(db, first)) == ("queued", "cancelled")
    assert (await claim(db)).id == second
    detail = await inspect_task(db, first)
    [action] = detail.interventions
    assert (action.action, action.actor, action.reason) == ("cancel", OPERATOR, "spam")
    assert detail.summary.finished_at is not None


async def test_a_cancelled_running_task_loses_its_lease_everywhere(db: Database) -> None:
    """Heartbeat, posts and finish of the worker all find the lease gone."""
    queue = PostgresTaskQueue(db)
    await queue_task(db, "1.0")
    task = await claim(db)
    await cancel_task(db, task.id, actor=OPERATOR)
    assert await queue.heartbeat(task) is False
    assert await queue.cancelled(task) is True
    outbox = Outbox(db, call_seconds=1, settle_seconds=1)
    with pytest.raises(Superseded):
        await outbox.claim(task.reply_id, task.id, task.attempts)
    await queue.finish(task)
    assert await state_of(db, task.id) == "cancelled"


async def test_cancelling_a_waiting_task_ends_its_subtasks(db: Database) -> None:
    """Subtasks of a cancelled task stop: their leases are gone and they are never claimed."""
    await queue_task(db, "1.0")
    task, rounds = await claim(db), PostgresDelegations(db)
    requests = tuple(SubtaskRequest("agent", {"instructions": f"part {n}"}) for n in range(2))
    await rounds.record(task, 0, Delegation("On it", requests, "c1", "{}"), timeout_seconds=60)
    await rounds.await_subtasks(task)
    claimed = await rounds.claim_subtask()
    assert claimed is not None
    await cancel_task(db, task.id, actor=OPERATOR)
    assert await rounds.heartbeat_subtask(claimed[0]) is False
    assert await rounds.claim_subtask() is None
    detail = await inspect_task(db, task.id)
    [round_0] = detail.rounds
    assert [s.state for s in round_0.subtasks] == ["failed", "failed"]
    assert all("cancelled by an operator" in (s.result or "") for s in round_0.subtasks)


async def test_a_cancel_racing_a_finish_has_one_winner(db: Database) -> None:
    """Cancel and finish at once, many times: either the task is done and the cancel was
    refused, or it is cancelled and the finish changed nothing."""
    queue = PostgresTaskQueue(db)
    outcomes = set()
    for n in range(20):
        await queue_task(db, f"{n}.0", thread=f"{n}.0")
        task = await claim(db)
        cancelled, _ = await asyncio.gather(
            cancel_task(db, task.id, actor=OPERATOR), queue.finish(task), return_exceptions=True
        )
        state = await state_of(db, task.id)
        if isinstance(cancelled, InterventionRefused):
            assert state == "done"
        else:
            assert not isinstance(cancelled, BaseException) and state == "cancelled"
        outcomes.add(state)
    assert outcomes <= {"done", "cancelled"}


async def test_finished_and_unknown_tasks_are_refused_in_one_sentence(db: Database) -> None:
    """Cancelling a done, failed or cancelled task, or retrying a live or done one, is refused."""
    queue = PostgresTaskQueue(db)
    done = await queue_task(db, "1.0", thread="1.0")
    await queue.finish(await claim(db))
    failed = await queue_task(db, "2.0", thread="2.0")
    await queue.fail(await claim(db), "RoundFailed: no")
    live = await queue_task(db, "3.0", thread="3.0")
    for task_id, wanted in ((done, "already done"), (failed, r"already ended \(failed\)")):
        with pytest.raises(InterventionRefused, match=wanted):
            await cancel_task(db, task_id, actor=OPERATOR)
    with pytest.raises(InterventionRefused, match="is done"):
        await retry_task(db, done, actor=OPERATOR)
    with pytest.raises(InterventionRefused, match="is queued and will run without a retry"):
        await retry_task(db, live, actor=OPERATOR)
    for change in (cancel_task, retry_task):
        with pytest.raises(UnknownTask, match="No task has the id 'T9:nope'"):
            await change(db, "T9:nope", actor=OPERATOR)
    with pytest.raises(UnknownTask):
        await inspect_task(db, "T9:nope")


async def test_a_task_posting_its_reply_cannot_be_cancelled(db: Database) -> None:
    """Once the reply's outbox row is claimed, the task is ending on its own."""
    await queue_task(db, "1.0")
    task = await claim(db)
    await Outbox(db, call_seconds=1, settle_seconds=1).claim(task.reply_id, task.id, task.attempts)
    with pytest.raises(InterventionRefused, match="already posting its reply"):
        await cancel_task(db, task.id, actor=OPERATOR)
    assert await state_of(db, task.id) == "running"


async def test_a_retried_task_runs_again_fresh_behind_its_thread(db: Database) -> None:
    """A failed task is queued again as a fresh attempt: its clock and request count start
    over, and it waits for the thread's unfinished tasks."""
    queue = PostgresTaskQueue(db)
    old = await queue_task(db, "1.0")
    await db.pool.execute(
        "UPDATE tasks SET created_at = now() - interval '2 days', model_requests = 9 WHERE id = $1",
        old,
    )
    first = await claim(db)
    await queue.fail(first, "TaskTimedOut: the task ran past its 900 s limit")
    later = await queue_task(db, "2.0")
    done = await retry_task(db, old, actor=OPERATOR, reason="model is back")
    assert (done.from_state, await state_of(db, old)) == ("failed", "queued")
    assert (await claim(db)).id == later  # the thread's later message keeps its turn
    await queue.finish(await _current(db, later))
    again = await claim(db)
    assert (again.id, again.attempts) == (old, first.attempts + 1)
    assert again.created_at is not None and first.created_at is not None
    assert again.created_at > first.created_at  # time limits count from the retry
    detail = await inspect_task(db, old)
    assert detail.summary.model_requests == 0 and detail.restarted_at is not None
    assert [i.action for i in detail.interventions] == ["retry"]


async def _current(db: Database, task_id: str) -> Task:
    row = await db.pool.fetchrow(
        "SELECT id, session_id, address, attempts FROM tasks WHERE id = $1", task_id
    )
    assert row is not None
    return task_from_row(row)


async def test_list_filters_by_state_place_and_age(db: Database) -> None:
    """State, team, channel, age and limit each narrow the list; newest first."""
    a = await queue_task(db, "1.0", thread="1.0", channel="C1")
    b = await queue_task(db, "2.0", thread="2.0", channel="C2")
    c = await queue_task(db, "3.0", thread="3.0", channel="C2")
    await db.pool.execute(
        "UPDATE tasks SET created_at = now() - interval '3 hours' WHERE id = $1", a
    )
    await cancel_task(db, b, actor=OPERATOR)

    async def ids(**options: object) -> list[str]:
        return [t.id for t in await list_tasks(db, TaskFilter(**options))]  # type: ignore[arg-type]

    assert await ids() == [c, b, a]
    assert await ids(states=["cancelled"]) == [b]
    assert await ids(states=["queued", "cancelled"], channel="C2") == [c, b]
    assert await ids(team="T2") == []
    assert await ids(older_than=2 * 3600) == [a]
    assert await ids(newer_than=3600) == [c, b]
    assert await ids(limit=1) == [c]


async def test_show_gathers_turn_rounds_reply_and_posts(db: Database) -> None:
    """Everything stored about a task comes back together, in order."""
    await queue_task(db, "1.0")
    task, rounds = await claim(db), PostgresDelegations(db)
    requests = (SubtaskRequest("agent", {"instructions": "look"}),)
    await rounds.record(task, 0, Delegation("Looking", requests, "c1", "{}"), timeout_seconds=60)
    outbox = Outbox(db, call_seconds=1, settle_seconds=1)
    await outbox.claim(task.ack_id(0), task.id, task.attempts)
    await outbox.mark_sent(task.ack_id(0), "1700000000.000100")
    reply = StoredMessage(task.reply_id, task.session_id, "assistant", "reply", "the answer")
    await PostgresHistory(db).append(reply, answers=task.user_message_id)
    detail = await inspect_task(db, task.id)
    assert [(m.kind, m.text) for m in detail.messages] == [
        ("turn", "question 1.0"),
        ("ack", "Looking"),
        ("reply", "the answer"),
    ]
    assert [(r.number, r.acknowledgment, len(r.subtasks)) for r in detail.rounds] == [
        (0, "Looking", 1)
    ]
    [post] = detail.posts
    assert (post.id, post.state, post.remote_ref) == (task.ack_id(0), "sent", "1700000000.000100")
    assert detail.summary.state == "running" and detail.lease_owner is not None
    assert detail.tool_calls == ()
    calls = PostgresToolCalls(db)
    await calls.tool_call(task, ToolCallRecord("call_9", "fake__echo", '{"text": "hi"}', "running"))
    await calls.tool_call(
        task, ToolCallRecord("call_9", "fake__echo", '{"text": "hi"}', "ok", "hi")
    )
    [call] = (await inspect_task(db, task.id)).tool_calls
    assert (call.name, call.state, call.arguments, call.output) == (
        "fake__echo",
        "ok",
        '{"text": "hi"}',
        "hi",
    )


async def test_show_lists_the_still_trying_notice_among_the_posts(db: Database) -> None:
    """The notice that every model was failing (`task:{id}:interim`) is one of the task's
    posts `tasks show` lists."""
    await queue_task(db, "9.0")
    task = await claim(db)
    outbox = Outbox(db, call_seconds=1, settle_seconds=1)
    await outbox.claim(task.interim_id, task.id, task.attempts)
    await outbox.mark_sent(task.interim_id, "1700000000.000900")
    assert [p.id for p in (await inspect_task(db, task.id)).posts] == [task.interim_id]
