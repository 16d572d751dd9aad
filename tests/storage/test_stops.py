"""A Stop stored in Postgres (storage/stops.py): the thread's working task loses its lease
and is queued to say so, later tasks are cancelled, subtasks end, and it is recorded."""

from __future__ import annotations

import asyncio

from agent import Delegation, SubtaskRequest
from storage import (
    Admission,
    Database,
    Outbox,
    PostgresDelegations,
    PostgresTaskQueue,
    ThreadStop,
    admit,
    retry_task,
    stop_thread,
)

STOP = ThreadStop("T1", "C1", "1.0", "U1")
DELEGATION = Delegation(
    "On it",
    tuple(SubtaskRequest("agent", {"instructions": f"part {n}"}) for n in range(2)),
    "call_1",
    '{"acknowledgment": "On it"}',
)


async def enqueue(db: Database, thread: str, ts: str, channel: str = "C1", user: str = "U1") -> str:
    task_id = f"T1:{channel}:{ts}"
    address = {"team": "T1", "channel": channel, "thread_ts": thread, "user": user}
    assert await admit(db, Admission(None, task_id, f"T1:{channel}:{thread}", address, ts))
    return task_id


async def state_of(db: Database, task_id: str) -> tuple[str, str | None]:
    row = await db.pool.fetchrow("SELECT state, stopped_by FROM tasks WHERE id = $1", task_id)
    assert row is not None
    return row["state"], row["stopped_by"]


async def test_a_stop_ends_the_running_lease_and_queues_the_task_to_say_so(
    fresh_db: Database,
) -> None:
    """The running task's heartbeat fails at once; claimed again it is marked stopped (by
    whom), and its finish cancels it; the presser's later task of the thread is cancelled,
    another person's and another thread's are not."""
    queue = PostgresTaskQueue(fresh_db)
    first = await enqueue(fresh_db, "1.0", "1.0", user="U2")
    later = await enqueue(fresh_db, "1.0", "1.1")
    others = await enqueue(fresh_db, "1.0", "1.2", user="U3")
    elsewhere = await enqueue(fresh_db, "2.0", "2.0")
    running = await queue.claim()
    assert running is not None and running.id == first and not running.stopped
    stopped = await stop_thread(fresh_db, STOP)
    assert (stopped.task_id, stopped.cancelled) == (first, (later,))
    assert not await queue.heartbeat(running)
    assert await queue.cancelled(running)
    assert await state_of(fresh_db, later) == ("cancelled", "slack:U1")
    assert await state_of(fresh_db, others) == ("queued", None)
    assert (await state_of(fresh_db, elsewhere))[0] == "queued"
    again = await queue.claim()
    assert again is not None and again.id == first and again.stopped
    assert again.stopped_by == "slack:U1"
    await queue.finish(again)
    assert await state_of(fresh_db, first) == ("cancelled", "slack:U1")
    rows = await fresh_db.pool.fetch(
        "SELECT task_id, action, actor FROM task_interventions ORDER BY id"
    )
    assert [(r["task_id"], r["action"], r["actor"]) for r in rows] == [
        (first, "stop", "slack:U1"),
        (later, "stop", "slack:U1"),
    ]


async def test_a_second_stop_and_a_quiet_thread_stop_nothing(fresh_db: Database) -> None:
    """Stopping again (Slack's redelivery) finds nothing more, nor does a thread without
    open work; a stop that ended a lease wakes every heartbeat (`leases_in_doubt`)."""
    assert not await stop_thread(fresh_db, STOP)
    task = await enqueue(fresh_db, "1.0", "1.0")
    woken = asyncio.create_task(fresh_db.leases_in_doubt())
    assert (await stop_thread(fresh_db, STOP)).task_id == task
    await asyncio.wait_for(woken, 10)
    assert not await stop_thread(fresh_db, STOP)


async def test_a_task_whose_reply_is_out_is_left_to_finish(fresh_db: Database) -> None:
    """A task whose reply is already in the thread has ended in effect: a Stop leaves it."""
    queue = PostgresTaskQueue(fresh_db)
    task_id = await enqueue(fresh_db, "1.0", "1.0")
    running = await queue.claim()
    assert running is not None
    outbox = Outbox(fresh_db, call_seconds=5, settle_seconds=1)
    await outbox.claim(running.reply_id, running.id, running.attempts)
    await outbox.mark_sent(running.reply_id, "9.9")
    assert not await stop_thread(fresh_db, STOP)
    assert await queue.heartbeat(running)
    assert (await state_of(fresh_db, task_id))[0] == "running"


async def test_subtasks_of_a_stopped_task_end_and_a_retry_starts_afresh(
    fresh_db: Database,
) -> None:
    """The stopped task's open subtasks end failed (their heartbeats fail); an operator's
    retry of it runs it again as an ordinary task, not a stopped one."""
    queue, rounds = PostgresTaskQueue(fresh_db), PostgresDelegations(fresh_db)
    await enqueue(fresh_db, "1.0", "1.0")
    task = await queue.claim()
    assert task is not None
    await rounds.record(task, 0, DELEGATION, timeout_seconds=60)
    await rounds.await_subtasks(task)
    claimed = await rounds.claim_subtask()
    assert claimed is not None
    assert (await stop_thread(fresh_db, STOP)).task_id == task.id
    assert not await rounds.heartbeat_subtask(claimed[0])
    states = await fresh_db.pool.fetch("SELECT state FROM subtasks WHERE task_id = $1", task.id)
    assert [s["state"] for s in states] == ["failed", "failed"]
    stopped = await queue.claim()
    assert stopped is not None and stopped.stopped
    await queue.finish(stopped)
    await retry_task(fresh_db, task.id, actor="operator")
    retried = await queue.claim()
    assert retried is not None and retried.id == task.id and not retried.stopped
