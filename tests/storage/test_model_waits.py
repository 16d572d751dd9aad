"""Tasks waiting for the models: woken by a new message in their thread or by a model
answering again (every replica told), and each thread told once per outage."""

from __future__ import annotations

import asyncio

from storage import (
    Admission,
    Database,
    PostgresModelWaits,
    PostgresTaskQueue,
    admit,
    announce_models_down,
    waiting_for_models,
    wake_waiting_for_models,
)

HOUR = 3600.0


async def enqueue(db: Database, thread: str, ts: str) -> str:
    task_id = f"T1:C1:{ts}"
    ok = await admit(
        db, Admission(None, task_id, f"T1:C1:{thread}", {"channel": "C1", "thread_ts": thread}, ts)
    )
    assert ok
    return task_id


async def deferred(db: Database, thread: str, ts: str) -> str:
    """A task of `thread` claimed, then deferred an hour for the models."""
    task_id = await enqueue(db, thread, ts)
    task = await PostgresTaskQueue(db).claim()
    assert task is not None and task.id == task_id
    await PostgresModelWaits(db).defer(task, HOUR, "every model slot is unavailable for now")
    return task_id


async def waits_now(db: Database, task_id: str) -> bool:
    """Whether the task is queued and runnable now."""
    query = "SELECT state = 'queued' AND run_after <= now() FROM tasks WHERE id = $1"
    return bool(await db.pool.fetchval(query, task_id))


async def test_a_new_message_in_its_thread_makes_the_waiting_task_try_now(
    fresh_db: Database,
) -> None:
    """A message in another thread leaves the waiting task at its backed-off time; one in
    its own thread makes it runnable now, claimed before the new one, its try counted as
    early."""
    queue, waits = PostgresTaskQueue(fresh_db), PostgresModelWaits(fresh_db)
    first = await deferred(fresh_db, "1.0", "1.0")
    elsewhere = await enqueue(fresh_db, "2.0", "2.0")
    assert not await waits_now(fresh_db, first)
    await enqueue(fresh_db, "1.0", "1.1")
    assert await waits_now(fresh_db, first)
    claimed = {
        t.id: t
        for t in await asyncio.gather(queue.claim(), queue.claim(), queue.claim())
        if t is not None
    }
    assert set(claimed) == {first, elsewhere}
    assert (await waits.standing(claimed[first])).early_tries == 1


async def test_a_task_retried_after_an_error_is_not_woken_by_a_message(
    fresh_db: Database,
) -> None:
    """Only a wait for the models is cut short: a retry after an error (even of a task
    that waited for the models before) keeps its back-off."""
    queue = PostgresTaskQueue(fresh_db)
    first = await deferred(fresh_db, "1.0", "1.0")
    await enqueue(fresh_db, "1.0", "1.1")
    task = await queue.claim()
    assert task is not None and task.id == first
    await queue.retry_later(task, HOUR, "RuntimeError")
    await enqueue(fresh_db, "1.0", "1.2")
    assert not await waits_now(fresh_db, first)


async def test_a_recovery_wakes_every_waiting_task_and_tells_every_replica(
    fresh_db: Database,
) -> None:
    """`wake_waiting_for_models` makes every waiting task runnable now, and another
    replica hears that the models are back and wakes its workers."""
    one = await deferred(fresh_db, "1.0", "1.0")
    two = await deferred(fresh_db, "2.0", "2.0")
    heard: asyncio.Queue[bool] = asyncio.Queue()
    async with Database(fresh_db._dsn, min_size=1, max_size=1) as replica:
        replica.on_models = heard.put_nowait
        await replica.lease_owner()  # listening
        replica.wakeup.clear()
        count, age = await waiting_for_models(fresh_db)
        assert count == 2 and age is not None and age >= 0
        assert await wake_waiting_for_models(fresh_db) == 2
        async with asyncio.timeout(10):
            assert await heard.get() is False
            await replica.wakeup.wait()
    assert await waits_now(fresh_db, one) and await waits_now(fresh_db, two)
    assert (await waiting_for_models(fresh_db))[0] == 2  # still marked until claimed


async def test_an_outage_is_announced_to_every_replica(fresh_db: Database) -> None:
    """`announce_models_down` reaches the other replicas' listener, waking no worker."""
    heard: asyncio.Queue[bool] = asyncio.Queue()
    async with Database(fresh_db._dsn, min_size=1, max_size=1) as replica:
        replica.on_models = heard.put_nowait
        await replica.lease_owner()
        await announce_models_down(fresh_db)
        async with asyncio.timeout(10):
            assert await heard.get() is True


async def test_a_thread_is_told_once_per_outage(fresh_db: Database) -> None:
    """After a task told its thread the models are unavailable, the thread's messages that
    arrived before that notice count as told; one that arrived after it does not."""
    queue, waits = PostgresTaskQueue(fresh_db), PostgresModelWaits(fresh_db)
    first = await deferred(fresh_db, "1.0", "1.0")
    await enqueue(fresh_db, "1.0", "1.1")
    task = await queue.claim()
    assert task is not None and task.id == first
    assert not (await waits.standing(task)).thread_told
    await waits.told(task)
    await queue.fail(task, "ModelsUnavailable: every model slot is unavailable for now")
    later = await enqueue(fresh_db, "1.0", "1.2")
    second = await queue.claim()
    assert second is not None and second.id == "T1:C1:1.1"
    assert (await waits.standing(second)).thread_told
    await queue.finish(second)
    third = await queue.claim()
    assert third is not None and third.id == later
    assert not (await waits.standing(third)).thread_told
