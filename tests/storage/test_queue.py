"""The task queue: leases, per-session order, crash take-over, wake-ups."""

from __future__ import annotations

import asyncio
import dataclasses

import asyncpg

from agent import Delivered, StoredMessage, Task, reply_id, user_message_id
from storage import (
    Admission,
    Database,
    Outbox,
    PostgresDelegations,
    PostgresHistory,
    PostgresTaskQueue,
    admit,
)
from storage.database import TASKS_CHANNEL, admitted_to, finished_by
from storage.queue import RECOVERY_SECONDS


async def enqueue(db: Database, thread: str, ts: str) -> str:
    task_id = f"T1:C1:{ts}"
    ok = await admit(
        db, Admission(None, task_id, f"T1:C1:{thread}", {"channel": "C1", "thread_ts": thread}, ts)
    )
    assert ok
    return task_id


async def test_tasks_of_one_session_run_one_at_a_time_in_order(fresh_db: Database) -> None:
    """The second task of a thread is not claimable until the first finishes."""
    queue = PostgresTaskQueue(fresh_db)
    first = await enqueue(fresh_db, "1.0", "1.0")
    second = await enqueue(fresh_db, "1.0", "1.1")
    claimed = await queue.claim()
    assert claimed is not None and claimed.id == first
    assert await queue.claim() is None
    await queue.finish(claimed)
    following = await queue.claim()
    assert following is not None and following.id == second


async def test_different_sessions_are_claimed_in_parallel(fresh_db: Database) -> None:
    """Two threads' tasks can both be running."""
    queue = PostgresTaskQueue(fresh_db)
    await enqueue(fresh_db, "2.0", "2.0")
    await enqueue(fresh_db, "3.0", "3.0")
    claims = await asyncio.gather(queue.claim(), queue.claim())
    assert {t.id for t in claims if t} == {"T1:C1:2.0", "T1:C1:3.0"}


async def test_concurrent_claims_never_share_a_task(fresh_db: Database) -> None:
    """Twenty racing claims over ten sessions lease each task once."""
    queue = PostgresTaskQueue(fresh_db)
    for n in range(10):
        await enqueue(fresh_db, f"4.{n}", f"4.{n}")
    claims = await asyncio.gather(*(queue.claim() for _ in range(20)))
    ids = [t.id for t in claims if t is not None]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 10


async def test_task_of_a_dead_process_is_taken_over_at_once(
    fresh_db: Database, database_dsn: str
) -> None:
    """When the claiming process's connection dies, another worker may claim the task."""
    task_id = await enqueue(fresh_db, "5.0", "5.0")
    dsn = fresh_db._dsn
    async with Database(dsn) as doomed:
        taken = await PostgresTaskQueue(doomed).claim()
        assert taken is not None and taken.id == task_id
        assert await PostgresTaskQueue(fresh_db).claim() is None
    # `doomed` closed its connections, as a killed process would.
    survivor = PostgresTaskQueue(fresh_db)
    resumed = await survivor.claim()
    assert resumed is not None and resumed.id == task_id and resumed.attempts == 2


async def test_a_dead_lease_is_taken_over_while_queued_work_keeps_workers_busy(
    fresh_db: Database,
) -> None:
    """Claims take queued tasks first; a dead lease is looked for by each process's
    periodic recovery look, so a busy queue cannot starve a take-over."""
    crashed = await enqueue(fresh_db, "6.0", "6.0")
    async with Database(fresh_db._dsn) as doomed:
        assert (await PostgresTaskQueue(doomed).claim()) is not None
    queued = [await enqueue(fresh_db, f"6.{n}", f"6.{n}") for n in range(1, 4)]
    survivor = PostgresTaskQueue(fresh_db)  # a fresh process: its recovery look is due
    first = await survivor.claim()
    assert first is not None and first.id == crashed and first.attempts == 2
    # The next claims, before the next look is due, take the queued tasks in order.
    rest = [await survivor.claim() for _ in queued]
    assert [t.id for t in rest if t is not None] == queued


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_an_idle_claim_looks_for_dead_leases_once_a_period(fresh_db: Database) -> None:
    """With nothing queued, a claim does not look for dead leases again before the look is
    due (that look scans every running task), and finds the dead one once it is."""
    clock = Clock()
    survivor = PostgresTaskQueue(fresh_db, clock=clock)
    assert await survivor.claim() is None  # the process's first look: nothing dead yet
    crashed = await enqueue(fresh_db, "6.5", "6.5")
    async with Database(fresh_db._dsn) as doomed:
        assert (await PostgresTaskQueue(doomed).claim()) is not None
    assert await survivor.claim() is None  # dead now, but the next look is not due
    clock.now += RECOVERY_SECONDS
    resumed = await survivor.claim()
    assert resumed is not None and resumed.id == crashed and resumed.attempts == 2


async def test_every_task_of_a_crash_is_taken_over_without_waiting_a_period(
    fresh_db: Database,
) -> None:
    """A look that took over a dead lease is followed by another at once, and wakes a
    worker for it: a crashed replica's tasks all resume, not one per period."""
    crashed = [await enqueue(fresh_db, f"6.6{n}", f"6.6{n}") for n in range(3)]
    async with Database(fresh_db._dsn) as doomed:
        doomed_queue = PostgresTaskQueue(doomed)
        assert len([await doomed_queue.claim() for _ in crashed]) == 3
    # A process that starts listening now hears none of the admissions' wake-ups.
    async with Database(fresh_db._dsn) as process:
        survivor = PostgresTaskQueue(process, clock=Clock())  # the clock never moves
        await process.lease_owner()
        process.wakeup.clear()
        resumed = [await survivor.claim() for _ in crashed]
        assert sorted(t.id for t in resumed if t is not None) == sorted(crashed)
        assert process.wakeup.is_set()  # each take-over woke a worker to look for the next
        assert await survivor.claim() is None  # the look that found nothing ends the chain
        assert not survivor.recovery.due(await process.lease_owner())


async def test_a_claim_finds_the_one_runnable_task_behind_a_backlog(fresh_db: Database) -> None:
    """Many queued tasks wait behind running ones in the same threads: a claim still finds
    the one runnable task among them (each thread's oldest open task, one look each)."""
    queue = PostgresTaskQueue(fresh_db)
    for thread in range(20):
        for n in range(5):
            await enqueue(fresh_db, f"7.{thread}", f"7.{thread}{n}")
    running = [await queue.claim() for _ in range(19)]
    assert len({t.id for t in running if t is not None}) == 19
    last = await queue.claim()
    assert last is not None and last.id == "T1:C1:7.190"  # thread 19's first message
    assert await queue.claim() is None  # everything else waits behind its thread


async def test_heartbeat_reports_a_lost_lease(fresh_db: Database) -> None:
    """A worker whose task was taken over learns it on its next heartbeat."""
    queue = PostgresTaskQueue(fresh_db)
    await enqueue(fresh_db, "6.0", "6.0")
    task = await queue.claim()
    assert task is not None
    assert await queue.heartbeat(task)
    stale = dataclasses.replace(task, attempts=task.attempts - 1)
    assert not await queue.heartbeat(stale)


async def test_retry_later_holds_the_task_until_its_time(fresh_db: Database) -> None:
    """A task put back for later is not claimable before then, and is afterwards."""
    queue = PostgresTaskQueue(fresh_db)
    await enqueue(fresh_db, "7.0", "7.0")
    task = await queue.claim()
    assert task is not None
    await queue.retry_later(task, 3600, "model busy")
    assert await queue.claim() is None
    await fresh_db.pool.execute("UPDATE tasks SET run_after = now() WHERE id = $1", task.id)
    again = await queue.claim()
    assert again is not None and again.id == task.id


async def test_a_queued_task_wakes_a_waiting_worker(fresh_db: Database) -> None:
    """NOTIFY from admission wakes `wait_for_work` long before its timeout."""
    queue = PostgresTaskQueue(fresh_db, poll_seconds=3600)
    fresh_db.wakeup.clear()
    waiter = asyncio.create_task(queue.wait_for_work(3600))
    await enqueue(fresh_db, "8.0", "8.0")
    await asyncio.wait_for(waiter, timeout=10)
    claimed = await queue.claim()
    assert isinstance(claimed, Task) and claimed.id == "T1:C1:8.0"


async def finish_notifications(db: Database, task: Task) -> list[str]:
    """The payloads of the task-channel notifications sent by finishing `task`: a marker
    notified after the finish committed arrives after them (NOTIFYs are delivered in
    commit order), so waiting for it is enough to have seen them all."""
    listener = await asyncpg.connect(db._dsn)
    heard: list[str] = []
    marker = asyncio.Event()

    def hear(conn: object, pid: int, channel: str, payload: str) -> None:
        heard.append(payload)
        if payload == "marker":
            marker.set()

    try:
        await listener.add_listener(TASKS_CHANNEL, hear)
        await PostgresTaskQueue(db).finish(task)
        await db.pool.execute("SELECT pg_notify($1, 'marker')", TASKS_CHANNEL)
        await asyncio.wait_for(marker.wait(), timeout=10)
    finally:
        await listener.close()
    return heard[:-1]


async def test_a_finish_commits_with_one_wake_up(fresh_db: Database) -> None:
    """A finish is one statement that ends the lease and sends one NOTIFY with its commit,
    also when nothing is queued in its thread (a message admitted while the finish ran is
    not visible to it, and must still find a worker). The NOTIFY names the process."""
    queue = PostgresTaskQueue(fresh_db)
    await enqueue(fresh_db, "3.0", "3.0")
    first = await queue.claim()
    assert first is not None and first.id == "T1:C1:3.0"
    owner = await fresh_db.lease_owner()
    assert await finish_notifications(fresh_db, first) == [finished_by(owner)]
    assert await fresh_db.pool.fetchval("SELECT state FROM tasks WHERE id = $1", first.id) == "done"


async def test_a_finish_wakes_a_worker_of_every_other_process_not_its_own(
    fresh_db: Database,
) -> None:
    """A finish that leaves nothing queued in its thread keeps no wake-up in its own
    process (the finish wakes one there itself when it does: the test below); another
    process's waiting worker wakes, for a message admitted while the finish ran."""
    other = Database(fresh_db._dsn)
    await other.open()
    try:
        queue = PostgresTaskQueue(fresh_db)
        fresh_db.wakeup.clear()
        await enqueue(fresh_db, "6.0", "6.0")
        await asyncio.wait_for(fresh_db.wakeup.wait(), timeout=10)  # the admission's
        task = await queue.claim()
        assert task is not None
        kept = fresh_db._pending_tickets
        fresh_db.wakeup.clear()
        waiting = asyncio.create_task(
            PostgresTaskQueue(other, poll_seconds=3600).wait_for_work(3600)
        )
        await queue.finish(task)
        await asyncio.wait_for(waiting, timeout=10)
        await asyncio.wait_for(fresh_db.wakeup.wait(), timeout=10)  # heard by observers
        assert fresh_db._pending_tickets == kept
    finally:
        await other.close()


async def test_a_superseded_finish_changes_nothing_and_wakes_nobody(fresh_db: Database) -> None:
    queue = PostgresTaskQueue(fresh_db)
    await enqueue(fresh_db, "5.0", "5.0")
    await enqueue(fresh_db, "5.0", "5.1")
    task = await queue.claim()
    assert task is not None
    stale = dataclasses.replace(task, attempts=task.attempts - 1)
    assert await finish_notifications(fresh_db, stale) == []
    assert await fresh_db.pool.fetchval("SELECT state FROM tasks WHERE id = $1", task.id) == (
        "running"
    )


async def _posting(db: Database, thread: str) -> tuple[PostgresTaskQueue, Task, Outbox]:
    """A claimed task whose reply's two parts are claimed in the outbox: the first open
    (a stream), the second being sent."""
    queue, outbox = PostgresTaskQueue(db), Outbox(db, call_seconds=5, settle_seconds=1)
    await enqueue(db, thread, thread)
    task = await queue.claim()
    assert task is not None
    for post in (task.reply_id, f"{task.reply_id}#1"):
        assert (await outbox.claim(post, task.id, task.attempts)).state == "new"
    await outbox.opened(task.reply_id, task.attempts, "111.1")
    return queue, task, outbox


async def _posts(db: Database, task: Task) -> list[tuple[str, str | None]]:
    rows = await db.pool.fetch(
        "SELECT state, remote_ref FROM outbox WHERE id LIKE $1 ORDER BY id", f"{task.reply_id}%"
    )
    return [(r["state"], r["remote_ref"]) for r in rows]


async def test_a_finish_marks_the_posts_it_is_handed_sent_with_the_tasks_end(
    fresh_db: Database,
) -> None:
    """`finish(delivered=…)` ends the task and marks its reply's posts sent, each with
    the ts it was handed (the one it showed at when handed none), in one statement."""
    queue, task, _ = await _posting(fresh_db, "9.0")
    landed = Delivered(((task.reply_id, None), (f"{task.reply_id}#1", "222.2")))
    await queue.finish(task, landed)
    assert await fresh_db.pool.fetchval("SELECT state FROM tasks WHERE id = $1", task.id) == "done"
    assert await _posts(fresh_db, task) == [("sent", "111.1"), ("sent", "222.2")]


async def test_a_superseded_finish_still_marks_the_posts_that_landed(fresh_db: Database) -> None:
    """A finish of a lost lease ends nothing, but the posts it says landed are marked sent:
    the mark is not fenced (as `Outbox.mark_sent` is not)."""
    queue, task, _ = await _posting(fresh_db, "9.1")
    stale = dataclasses.replace(task, attempts=task.attempts - 1)
    await queue.finish(stale, Delivered(((task.reply_id, "111.1"),)))
    state = await fresh_db.pool.fetchval("SELECT state FROM tasks WHERE id = $1", task.id)
    assert state == "running"
    assert await _posts(fresh_db, task) == [("sent", "111.1"), ("sending", None)]


async def test_a_claim_says_whether_the_tasks_reply_is_stored(fresh_db: Database) -> None:
    """A claimed task knows whether its reply (spelled by `agent.reply_id`) is stored: a
    crash after storing it, or a limit notice stored at admission, leaves one to post."""
    queue, history = PostgresTaskQueue(fresh_db), PostgresHistory(fresh_db)
    answered = await enqueue(fresh_db, "9.0", "9.0")
    await history.append(
        StoredMessage(reply_id(answered), "T1:C1:9.0", "assistant", "reply", "stored"),
        answers=user_message_id(answered),
    )
    await enqueue(fresh_db, "9.5", "9.5")
    claims = {t.id: t.stored_reply for t in await asyncio.gather(queue.claim(), queue.claim()) if t}
    assert claims == {answered: True, "T1:C1:9.5": False}
    # The workers' own claim (a subtask, else a task) says the same.
    again = await enqueue(fresh_db, "9.9", "9.9")
    claimed = await PostgresDelegations(fresh_db).claim_next(queue)
    assert isinstance(claimed, Task) and (claimed.id, claimed.stored_reply) == (again, False)


async def settled_wakeups(db: Database) -> None:
    """Wait until every NOTIFY sent so far has come in (a marker notified now comes in
    after them: an admission's, to a thread no test has), then take the wake-ups they
    left: the process's wake-ups start here."""
    db.wakeup.clear()
    start = db.heard
    await db.pool.execute("SELECT pg_notify($1, $2)", TASKS_CHANNEL, admitted_to("marker"))
    async with asyncio.timeout(10):
        while not any(i > start and concerns == "marker" for i, concerns in db._heard):
            await db.wakeup.wait()
            db.wakeup.clear()
    while db._pending_tickets:
        await db.next_signal()


async def test_a_finish_wakes_a_worker_for_its_threads_next_message(fresh_db: Database) -> None:
    """The finishing process hears its own finish as no wake-up: when the finish makes the
    thread's next message runnable, it keeps one for a worker itself; when nothing is
    queued behind it, none (the worker that finished waits, and nobody looks in vain)."""
    queue = PostgresTaskQueue(fresh_db, poll_seconds=3600)
    await enqueue(fresh_db, "9.0", "9.0")
    await enqueue(fresh_db, "9.0", "9.1")
    first = await queue.claim()
    assert first is not None and first.id == "T1:C1:9.0"
    await settled_wakeups(fresh_db)
    await queue.finish(first)
    assert fresh_db._pending_tickets == 1
    async with asyncio.timeout(10):  # in this task: its claims are its worker's
        await queue.wait_for_work(3600)
    second = await queue.claim()
    assert second is not None and second.id == "T1:C1:9.1"
    await settled_wakeups(fresh_db)
    await queue.fail(second, "the last of its thread")
    assert fresh_db._pending_tickets == 0


async def test_a_finish_asks_whether_a_notify_heard_while_it_ran_concerns_its_thread(
    fresh_db: Database,
) -> None:
    """An admission's NOTIFY names its thread (a real admission's here, through
    `admit_thread_turn`): one to another thread does not concern a finish, one to its own does,
    and so does one of a kind that names none, or more than are remembered."""
    await settled_wakeups(fresh_db)
    since = fresh_db.heard
    await enqueue(fresh_db, "14.0", "14.0")
    await settled_wakeups(fresh_db)
    assert not fresh_db.heard_for("T1:C1:15.0", since=since)
    assert fresh_db.heard_for("T1:C1:14.0", since=since)
    assert not fresh_db.heard_for("T1:C1:14.0", since=fresh_db.heard)
    since = fresh_db.heard
    await fresh_db.pool.execute("SELECT pg_notify($1, '')", TASKS_CHANNEL)
    await settled_wakeups(fresh_db)
    assert fresh_db.heard_for("T1:C1:15.0", since=since)
    since = fresh_db.heard
    for _ in range(300):
        await fresh_db.pool.execute("SELECT pg_notify($1, $2)", TASKS_CHANNEL, admitted_to("x"))
    await settled_wakeups(fresh_db)
    assert fresh_db.heard_for("T1:C1:15.0", since=since)


async def test_work_nobody_announced_is_claimed_by_a_chain_of_wake_ups(fresh_db: Database) -> None:
    """After a wake-up for work nobody announced (a reconnect's), each claim that finds a
    task wakes one more worker, until a claim finds nothing; a claim after an announced
    wake-up (an admission's) wakes nobody else."""
    queue = PostgresTaskQueue(fresh_db, poll_seconds=3600)
    for thread in ("10.0", "11.0", "12.0"):
        await enqueue(fresh_db, thread, thread)
    await settled_wakeups(fresh_db)  # as if the admissions' wake-ups were never heard
    fresh_db.wake(backlog=True)
    claimed = []
    while True:
        async with asyncio.timeout(10):  # in this task: its claims are its worker's
            await queue.wait_for_work(3600)
        task = await queue.claim()
        if task is None:
            break
        claimed.append(task.id)
    assert claimed == ["T1:C1:10.0", "T1:C1:11.0", "T1:C1:12.0"]
    assert fresh_db._pending_tickets == 0
    await enqueue(fresh_db, "13.0", "13.0")
    async with asyncio.timeout(10):  # in this task: its claims are its worker's
        await queue.wait_for_work(3600)
    announced = await queue.claim()
    assert announced is not None and announced.id == "T1:C1:13.0"
    assert fresh_db._pending_tickets == 0


async def test_a_claim_after_a_poll_that_timed_out_looks_for_more(fresh_db: Database) -> None:
    """What a worker finds when nothing woke it nobody announced: it wakes another."""
    queue = PostgresTaskQueue(fresh_db, poll_seconds=0.01)
    for thread in ("16.0", "17.0"):
        await enqueue(fresh_db, thread, thread)
    await settled_wakeups(fresh_db)
    await queue.wait_for_work(3600)  # the poll times out
    assert await queue.claim() is not None
    assert fresh_db._pending_tickets == 1


async def test_wake_ups_past_the_bound_are_counted_as_dropped(fresh_db: Database) -> None:
    """Kept wake-ups are bounded; the ones past the bound are counted, so a worker that
    ran a task meanwhile knows to look again at once (agent/durable/runner.py)."""
    await settled_wakeups(fresh_db)
    dropped = fresh_db.dropped_wakeups
    for _ in range(fresh_db._max_tickets + 3):
        fresh_db.wake()
    assert fresh_db.dropped_wakeups == dropped + 3
    assert PostgresTaskQueue(fresh_db).dropped_wakeups() == dropped + 3
