"""A thread's queue modes in Postgres (storage/thread_queue.py): a claim covers the later
queued messages of its thread in its own statement, a Stop and a cancel give covered
messages back or cancel them, a steering round takes new ones, and an interrupt queues the
asker's working task again."""

from __future__ import annotations

from datetime import UTC, datetime

from agent import StoredMessage, Task
from storage import (
    MAX_COVERED,
    Admission,
    Database,
    OwnStop,
    PostgresDelegations,
    PostgresHistory,
    PostgresTaskQueue,
    QueueModes,
    Retention,
    ThreadStop,
    admit,
    cancel_task,
    delete_turn,
    interrupt_asker,
    revise_turn,
    stop_own,
    stop_thread,
    take_steered,
)

COLLECT = QueueModes("collect")
NOW = datetime.now(UTC)


def collecting(db: Database, modes: QueueModes = COLLECT) -> PostgresTaskQueue:
    return PostgresTaskQueue(db, modes=lambda: modes)


async def enqueue(db: Database, ts: str, user: str = "U1", thread: str = "1.0") -> str:
    task_id = f"T1:C1:{ts}"
    address = {"team": "T1", "channel": "C1", "thread_ts": thread, "user": user}
    admission = Admission(
        None, task_id, f"T1:C1:{thread}", address, f"m{ts}", user=f"T1:{user}", channel="T1:C1"
    )
    assert await admit(db, admission)
    return task_id


async def states(db: Database) -> dict[str, tuple[str, str | None]]:
    rows = await db.pool.fetch("SELECT id, state, covered_by FROM tasks ORDER BY seq")
    return {r["id"]: (r["state"], r["covered_by"]) for r in rows}


async def claimed(queue: PostgresTaskQueue) -> Task:
    task = await queue.claim()
    assert task is not None
    return task


async def test_the_next_task_covers_what_queued_behind_it(fresh_db: Database) -> None:
    """Under collect, the task claimed after the first covers the two messages queued
    behind it; its window reads up to the newest and its reply is anchored after it."""
    queue = collecting(fresh_db)
    first = await enqueue(fresh_db, "1.0")
    running = await claimed(queue)
    assert running.id == first and running.covers == ()
    second, third = await enqueue(fresh_db, "1.1"), await enqueue(fresh_db, "1.2")
    await queue.finish(running)
    task = await claimed(queue)
    assert (task.id, task.covers) == (second, (third,))
    assert task.newest_turn_id == f"task:{third}:user"
    assert (await states(fresh_db))[third] == ("covered", second)
    assert await queue.claim() is None  # a covered task is never claimed
    history = PostgresHistory(fresh_db)
    window = await history.window(task, max_chars=10_000, max_messages=50)
    assert [m.text for m in window] == ["m1.0", "m1.1", "m1.2"]
    reply = StoredMessage(task.reply_id, task.session_id, "assistant", "reply", "both")
    await history.append(reply, answers=task.newest_turn_id)
    await queue.finish(task)
    later = await claimed_after(fresh_db, queue, "1.3")
    window = await history.window(later, max_chars=10_000, max_messages=50)
    assert [m.text for m in window][-3:] == ["m1.2", "both", "m1.3"]


async def claimed_after(db: Database, queue: PostgresTaskQueue, ts: str) -> Task:
    task_id = await enqueue(db, ts)
    task = await claimed(queue)
    assert task.id == task_id
    return task


async def test_followup_covers_nothing(fresh_db: Database) -> None:
    """Under followup (and by default, in storage) each message is its own task, in order."""
    queue = PostgresTaskQueue(fresh_db)
    first, second = await enqueue(fresh_db, "1.0"), await enqueue(fresh_db, "1.1")
    task = await claimed(queue)
    assert (task.id, task.covers) == (first, ())
    await queue.finish(task)
    assert (await claimed(queue)).id == second


async def test_a_channel_of_its_own_mode_is_followed(fresh_db: Database) -> None:
    """A channel's own mode wins over the deployment's."""
    queue = collecting(fresh_db, QueueModes("collect", {"C1": "followup"}))
    await enqueue(fresh_db, "1.0")
    await enqueue(fresh_db, "1.1")
    assert (await claimed(queue)).covers == ()


async def test_a_rerun_covers_what_it_covered_and_what_came_since(fresh_db: Database) -> None:
    """A task queued again (models down) keeps what it covered and, claimed again, covers
    what arrived meanwhile too; nothing is covered twice."""
    queue = collecting(fresh_db)
    first, second = await enqueue(fresh_db, "1.0"), await enqueue(fresh_db, "1.1")
    task = await claimed(queue)
    assert (task.id, task.covers) == (first, (second,))
    await queue.retry_later(task, 0, "models down")
    third = await enqueue(fresh_db, "1.2")
    again = await claimed(queue)
    assert (again.id, again.covers) == (first, (second, third))


async def test_a_task_with_its_reply_stored_covers_nothing_more(fresh_db: Database) -> None:
    """A reply already stored was written without the later messages: claimed again (a
    crash before its post) it covers nothing new, and they get their own answer."""
    queue = collecting(fresh_db)
    await enqueue(fresh_db, "1.0")
    task = await claimed(queue)
    reply = StoredMessage(task.reply_id, task.session_id, "assistant", "reply", "one")
    await PostgresHistory(fresh_db).append(reply, answers=task.newest_turn_id)
    await queue.retry_later(task, 0, "crashed")
    second = await enqueue(fresh_db, "1.1")
    again = await claimed(queue)
    assert again.covers == () and again.stored_reply
    await queue.finish(again)
    assert (await claimed(queue)).id == second


async def test_covering_never_jumps_a_message_it_cannot_cover(fresh_db: Database) -> None:
    """A stopped message in the middle ends the run of covered ones: what comes after it
    waits its turn, in order."""
    queue = collecting(fresh_db)
    await enqueue(fresh_db, "1.0")
    running = await claimed(queue)
    second = await enqueue(fresh_db, "1.1")
    blocker, after = await enqueue(fresh_db, "1.2"), await enqueue(fresh_db, "1.3")
    await fresh_db.pool.execute("UPDATE tasks SET stopped_at = now() WHERE id = $1", blocker)
    await queue.finish(running)
    task = await claimed(queue)
    assert (task.id, task.covers) == (second, ())
    assert (await states(fresh_db))[after] == ("queued", None)


async def test_one_task_covers_at_most_max_covered(fresh_db: Database) -> None:
    """A long burst is covered a window's worth at a time; the rest is the next task's."""
    queue = collecting(fresh_db)
    ids = [await enqueue(fresh_db, f"1.{n:02d}") for n in range(MAX_COVERED + 3)]
    task = await claimed(queue)
    assert task.covers == tuple(ids[1 : MAX_COVERED + 1])
    await queue.finish(task)
    assert (await claimed(queue)).covers == tuple(ids[MAX_COVERED + 2 :])


async def test_a_stop_cancels_the_pressers_covered_and_gives_back_the_others(
    fresh_db: Database,
) -> None:
    """Stop of a task that covers messages: the presser's covered ones are cancelled,
    another person's is queued again and answered after the note."""
    queue = collecting(fresh_db)
    first = await enqueue(fresh_db, "1.0")
    own, others = await enqueue(fresh_db, "1.1"), await enqueue(fresh_db, "1.2", user="U2")
    task = await claimed(queue)
    assert task.covers == (own, others)
    stopped = await stop_thread(fresh_db, ThreadStop("T1", "C1", "1.0", "U1"))
    assert (stopped.task_id, stopped.cancelled) == (first, (own,))
    after = await states(fresh_db)
    assert after[own] == ("cancelled", first) and after[others] == ("queued", None)
    note = await claimed(queue)
    assert note.stopped and note.id == first
    await queue.finish(note)
    assert (await claimed(queue)).id == others


async def test_stopping_ones_own_work_gives_back_what_it_covered_of_others(
    fresh_db: Database,
) -> None:
    """`/threadgate stop` (or the App Home's Stop) of a task that covers messages: the
    person's own covered ones are cancelled with it, another person's is queued again."""
    queue = collecting(fresh_db)
    first = await enqueue(fresh_db, "1.0")
    own, others = await enqueue(fresh_db, "1.1"), await enqueue(fresh_db, "1.2", user="U2")
    assert (await claimed(queue)).covers == (own, others)
    stopped = await stop_own(fresh_db, OwnStop("T1", "U1", channel="C1"))
    assert stopped.stopped == (first,)
    after = await states(fresh_db)
    assert after[own] == ("cancelled", first) and after[others] == ("queued", None)
    note = await claimed(queue)
    assert note.stopped and note.id == first
    await queue.finish(note)
    assert (await claimed(queue)).id == others


async def test_an_operators_cancel_gives_covered_messages_back(fresh_db: Database) -> None:
    """Cancelling the covering task queues what it covered again: none is left unanswered."""
    queue = collecting(fresh_db)
    first, second = await enqueue(fresh_db, "1.0"), await enqueue(fresh_db, "1.1")
    assert (await claimed(queue)).covers == (second,)
    await cancel_task(fresh_db, first, actor="operator")
    assert (await states(fresh_db))[second] == ("queued", None)
    assert (await claimed(queue)).id == second


async def test_a_steering_round_takes_the_new_messages_under_its_lease(
    fresh_db: Database,
) -> None:
    """`take_steered` covers what queued behind the running task, and only while its
    lease holds."""
    queue = collecting(fresh_db, QueueModes("steer"))
    first = await enqueue(fresh_db, "1.0")
    task = await claimed(queue)
    second = await enqueue(fresh_db, "1.1")
    assert await take_steered(fresh_db, task.id, task.attempts) == [second]
    assert await take_steered(fresh_db, task.id, task.attempts) == []
    await queue.retry_later(task, 0, "lost")
    await enqueue(fresh_db, "1.2")
    assert await take_steered(fresh_db, first, task.attempts) == []


async def test_an_interrupt_queues_the_askers_working_task_again(fresh_db: Database) -> None:
    """A new message of the asker ends the working task's lease and its subtasks; claimed
    again it covers the new one. Another person's message interrupts nothing."""
    queue, rounds = collecting(fresh_db, QueueModes("interrupt")), PostgresDelegations(fresh_db)
    first = await enqueue(fresh_db, "1.0")
    task = await claimed(queue)
    others = await enqueue(fresh_db, "1.1", user="U2")
    assert await interrupt_asker(fresh_db, others) is None
    assert await queue.heartbeat(task)
    own = await enqueue(fresh_db, "1.2")
    assert await interrupt_asker(fresh_db, own) == first
    assert not await queue.heartbeat(task)
    again = await claimed(queue)
    assert (again.id, again.covers) == (first, (others, own))
    assert not again.stopped
    assert (await rounds.load(again)).pending is None
    action = await fresh_db.pool.fetchval(
        "SELECT action FROM task_interventions WHERE task_id = $1", first
    )
    assert action == "interrupt"


async def test_the_interrupted_attempt_and_only_it_is_told_it_was_interrupted(
    fresh_db: Database,
) -> None:
    """The attempt an interrupt ended learns it was interrupted, also once the task was
    claimed again; the attempt after it, and one before any interrupt, were not."""
    queue = collecting(fresh_db, QueueModes("interrupt"))
    await enqueue(fresh_db, "1.0")
    before = await claimed(queue)
    await queue.retry_later(before, 0, "models down")
    task = await claimed(queue)
    assert not await queue.interrupted(task)
    assert await interrupt_asker(fresh_db, await enqueue(fresh_db, "1.1")) == task.id
    assert await queue.interrupted(task)
    again = await claimed(queue)
    assert await queue.interrupted(task) and not await queue.cancelled(task)
    assert not await queue.interrupted(again) and not await queue.interrupted(before)
    await queue.retry_later(again, 0, "models down")
    await claimed(queue)
    assert not await queue.interrupted(again)


async def test_an_edit_of_a_waiting_message_is_what_its_answer_reads(fresh_db: Database) -> None:
    """A queued message edited before it is covered is read edited; a deleted one is
    cancelled, covered by nobody, and jumps nothing."""
    queue = collecting(fresh_db)
    await enqueue(fresh_db, "1.0")
    running = await claimed(queue)
    edited, deleted, last = [await enqueue(fresh_db, ts) for ts in ("1.1", "1.2", "1.3")]
    assert await revise_turn(
        fresh_db, event_id=None, message_id=f"task:{edited}:user", text="m1.1 fixed", edited_at=NOW
    )
    gone = await delete_turn(
        fresh_db, event_id=None, message_ids=[f"task:{deleted}:user"], task_id=deleted
    )
    assert gone is not None and gone.cancelled
    await queue.finish(running)
    task = await claimed(queue)
    assert (task.id, task.covers) == (edited, (last,))
    window = await PostgresHistory(fresh_db).window(task, max_chars=10_000, max_messages=50)
    assert [m.text for m in window][-3:] == ["m1.1 fixed", "", "m1.3"]
    assert (await states(fresh_db))[deleted] == ("cancelled", None)


async def test_retention_keeps_a_covered_task_while_its_answer_is_open(fresh_db: Database) -> None:
    """A covered task past retention stays while the task that answers it is open, and goes
    with the others once that one ended."""
    queue = collecting(fresh_db)
    await enqueue(fresh_db, "1.0")
    covered = await enqueue(fresh_db, "1.1")
    task = await claimed(queue)
    await fresh_db.pool.execute("UPDATE tasks SET finished_at = now() - interval '3 days'")
    await Retention(fresh_db, days=1).run()
    assert covered in await states(fresh_db)
    await queue.finish(task)
    await fresh_db.pool.execute("UPDATE tasks SET finished_at = now() - interval '3 days'")
    await Retention(fresh_db, days=1).run()
    assert await states(fresh_db) == {}
