"""The outbox: claims fenced by the task's lease, and how long an unknown outcome waits."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from agent import Task
from storage import Admission, Database, Outbox, PostgresTaskQueue, Superseded, admit
from storage.database import LEASE_LOCK_SPACE

CALL, SETTLE = 30.0, 5.0
POST = "task:T1:C1:1.0:reply"


async def leased_task(db: Database) -> Task:
    await admit(
        db, Admission(None, "T1:C1:1.0", "T1:C1:1.0", {"channel": "C1", "thread_ts": "1.0"}, "q")
    )
    task = await PostgresTaskQueue(db).claim()
    assert task is not None
    return task


async def taken_over(db: Database, task: Task) -> Task:
    """Drop the process's signal connection (its lease owner's lock goes with it) and
    claim the task again: the next attempt."""
    owner = await db.lease_owner()
    in_doubt = asyncio.create_task(db.leases_in_doubt())
    conn = await asyncpg.connect(db._dsn)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks"
            " WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND objsubid = 2",
            LEASE_LOCK_SPACE,
            owner,
        )
    finally:
        await conn.close()
    await asyncio.wait_for(in_doubt, 10)
    again = await PostgresTaskQueue(db).claim()
    assert again is not None and again.attempts == task.attempts + 1
    return again


async def test_a_claim_by_a_superseded_attempt_is_refused(fresh_db: Database) -> None:
    """Once the task was taken over, the old attempt's claims change nothing."""
    outbox = Outbox(fresh_db, call_seconds=CALL, settle_seconds=SETTLE)
    task = await leased_task(fresh_db)
    current = await taken_over(fresh_db, task)
    with pytest.raises(Superseded):
        await outbox.claim(POST, task.id, task.attempts)
    assert await fresh_db.pool.fetchval("SELECT count(*) FROM outbox") == 0
    assert (await outbox.claim(POST, current.id, current.attempts)).state == "new"
    with pytest.raises(Superseded):
        await outbox.arm(POST, task.id, task.attempts)


async def test_an_unknown_outcome_waits_until_the_call_must_be_over(fresh_db: Database) -> None:
    """A call's outcome is unknown: a claim waits out its time limit plus the margin, or
    only the margin once the caller saw the call end; a refused call is posted again
    without looking; a sent one is done."""
    outbox = Outbox(fresh_db, call_seconds=CALL, settle_seconds=SETTLE)
    task = await leased_task(fresh_db)
    assert (await outbox.claim(POST, task.id, task.attempts)).state == "new"
    unknown = await outbox.claim(POST, task.id, task.attempts)
    assert unknown.state == "unknown" and CALL < unknown.wait_seconds <= CALL + SETTLE
    assert unknown.since is not None
    await outbox.call_ended(POST, task.attempts, posted=None)
    ended = await outbox.claim(POST, task.id, task.attempts)
    assert ended.state == "unknown" and ended.wait_seconds <= SETTLE
    assert ended.since == unknown.since
    assert await outbox.arm(POST, task.id, task.attempts)
    await outbox.call_ended(POST, task.attempts, posted=False)
    assert (await outbox.claim(POST, task.id, task.attempts)).state == "new"
    await outbox.mark_sent(POST, "1.5")
    assert (await outbox.claim(POST, task.id, task.attempts)).state == "sent"
    assert not await outbox.arm(POST, task.id, task.attempts)


async def test_a_later_claimer_waits_for_the_earlier_calls_limit(fresh_db: Database) -> None:
    """The attempt that took a row over waits for the earlier attempt's call; the earlier
    attempt, superseded, cannot shorten that wait by saying its call ended."""
    outbox = Outbox(fresh_db, call_seconds=CALL, settle_seconds=SETTLE)
    task = await leased_task(fresh_db)
    assert (await outbox.claim(POST, task.id, task.attempts)).state == "new"
    current = await taken_over(fresh_db, task)
    first = await outbox.claim(POST, current.id, current.attempts)
    assert first.state == "unknown" and first.wait_seconds > CALL
    await outbox.call_ended(POST, task.attempts, posted=None)
    await outbox.call_ended(POST, task.attempts, posted=False)
    again = await outbox.claim(POST, current.id, current.attempts)
    assert again.state == "unknown" and again.wait_seconds > CALL


async def test_an_open_stream_is_completed_by_whoever_claims_it_next(fresh_db: Database) -> None:
    """A streamed message's ts is kept the moment Slack returns it: the row is 'open', and
    the next claim — this attempt's or the one that took the task over — gets that ts to
    complete, never "new" (which would post a second message)."""
    outbox = Outbox(fresh_db, call_seconds=CALL, settle_seconds=SETTLE)
    task = await leased_task(fresh_db)
    assert (await outbox.claim(POST, task.id, task.attempts)).state == "new"
    await outbox.opened(POST, task.attempts, "1700000000.000200")
    assert await outbox.shown_at(POST) == ("open", "1700000000.000200")
    again = await outbox.claim(POST, task.id, task.attempts)
    assert (again.state, again.ts) == ("open", "1700000000.000200")
    current = await taken_over(fresh_db, task)
    after_crash = await outbox.claim(POST, current.id, current.attempts)
    assert (after_crash.state, after_crash.ts) == ("open", "1700000000.000200")
    assert await outbox.known_refs(["1700000000.000200", "1700000000.000300"]) == {
        "1700000000.000200"
    }
    await outbox.mark_sent(POST, "1700000000.000200")
    assert (await outbox.claim(POST, current.id, current.attempts)).state == "sent"


async def test_a_draft_taken_back_is_released_only_by_the_current_attempt(
    fresh_db: Database,
) -> None:
    """Releasing an open row (its message deleted) makes the next claim post afresh; an
    attempt that lost the task can neither read the ts to delete nor release the row."""
    outbox = Outbox(fresh_db, call_seconds=CALL, settle_seconds=SETTLE)
    task = await leased_task(fresh_db)
    await outbox.claim(POST, task.id, task.attempts)
    await outbox.opened(POST, task.attempts, "1.000200")
    current = await taken_over(fresh_db, task)
    with pytest.raises(Superseded):
        await outbox.open_ts(POST, task.id, task.attempts)
    with pytest.raises(Superseded):
        await outbox.release(POST, task.id, task.attempts, "1.000200")
    assert await outbox.open_ts(POST, current.id, current.attempts) == "1.000200"
    await outbox.release(POST, current.id, current.attempts, "1.000200")
    assert await outbox.shown_at(POST) == ("unsent", None)
    assert (await outbox.claim(POST, current.id, current.attempts)).state == "new"


async def test_only_the_attempt_that_armed_the_row_records_its_stream(fresh_db: Database) -> None:
    """`opened` is the answer to the call this attempt armed: a row another attempt took
    over since keeps what that attempt knows."""
    outbox = Outbox(fresh_db, call_seconds=CALL, settle_seconds=SETTLE)
    task = await leased_task(fresh_db)
    await outbox.claim(POST, task.id, task.attempts)
    current = await taken_over(fresh_db, task)
    assert (await outbox.claim(POST, current.id, current.attempts)).state == "unknown"
    await outbox.opened(POST, task.attempts, "1.000900")
    assert await outbox.shown_at(POST) == ("sending", None)


async def test_a_claim_racing_another_claims_insert_takes_the_row_over_after_it(
    fresh_db: Database,
) -> None:
    """A claim that meets the row's insert by another, uncommitted claim waits for it, then
    finds the row as that claim left it (its call's outcome unknown), like any later claim:
    never "new", which would post a second time."""
    outbox = Outbox(fresh_db, call_seconds=CALL, settle_seconds=SETTLE)
    task = await leased_task(fresh_db)
    other = await asyncpg.connect(fresh_db._dsn)
    try:
        transaction = other.transaction()
        await transaction.start()
        await other.execute(
            "INSERT INTO outbox (id, state, claimed_by, claimed_at, first_claimed_at,"
            " settle_after) VALUES ($1, 'sending', $2, now(), now(), now() + interval '35 s')",
            POST,
            task.attempts,
        )
        claim = asyncio.create_task(outbox.claim(POST, task.id, task.attempts))
        async with asyncio.timeout(10):  # until the claim waits on the other's insert
            while not await fresh_db.pool.fetchval(  # noqa: ASYNC110 - another session's lock wait, polled
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock')"
            ):
                await asyncio.sleep(0.01)
        await transaction.commit()
        found = await asyncio.wait_for(claim, 10)
    finally:
        await other.close()
    assert found.state == "unknown" and found.wait_seconds > CALL
    assert await fresh_db.pool.fetchval("SELECT attempts FROM outbox WHERE id = $1", POST) == 2
