"""Schedules in Postgres: each period fired once however many fire it at once, a crash
mid-fire leaves nothing half done, missed periods caught up once or skipped, the last
outcome read from the run's task, and a person's schedules kept to that person."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from agent import Task, recur_every, recur_once
from storage import (
    Database,
    NewSchedule,
    PostgresTaskQueue,
    ScheduledRun,
    StoredSchedule,
    UnknownSchedule,
    create_schedule,
    delete_schedule,
    fire_schedule,
    get_schedule,
    list_schedules,
    pause_schedule,
    pause_workspace,
    resume_schedule,
    run_task_id,
    seconds_until_due,
)

LATE = 60.0


def plan(schedule: StoredSchedule, period: datetime) -> ScheduledRun:
    return ScheduledRun(
        f"T1:{schedule.channel}:schedule:{schedule.id}",
        {"team": "T1", "channel": schedule.channel or "", "thread_ts": ""},
        f"run of {period.isoformat()}",
        f"T1:{schedule.channel}",
    )


async def new(db: Database, every: str = "10s", **options: object) -> StoredSchedule:
    fields: dict[str, object] = {
        "team": "T1",
        "target": "channel",
        "prompt": "digest",
        "recurrence": recur_every(every),
        "created_by": "test",
        "channel": "C1",
    } | options
    return await create_schedule(db, NewSchedule(**fields))  # type: ignore[arg-type]


async def due_since(db: Database, schedule: StoredSchedule, seconds: float) -> None:
    """As if the scheduler had been away: the next period started `seconds` ago."""
    await db.pool.execute(
        "UPDATE schedules SET next_run_at = date_trunc('second', now()) - make_interval(secs => $2),"
        " anchor_at = date_trunc('second', now()) - make_interval(secs => $2) WHERE id = $1",
        int(schedule.id),
        seconds,
    )


async def runs(db: Database, schedule: StoredSchedule) -> list[str]:
    rows = await db.pool.fetch(
        "SELECT id FROM tasks WHERE schedule_id = $1 ORDER BY seq", int(schedule.id)
    )
    return [r["id"] for r in rows]


async def test_a_new_schedule_waits_for_its_first_period(fresh_db: Database) -> None:
    """Stored, its first period is one period after now: nothing is due yet."""
    schedule = await new(fresh_db)
    assert schedule.state == "active" and schedule.next_run_at is not None
    assert schedule.next_run_at - schedule.anchor_at == timedelta(seconds=10)
    assert await fire_schedule(fresh_db, schedule.id, plan, late_seconds=LATE) is None


async def test_with_no_active_schedule_nothing_is_due(fresh_db: Database) -> None:
    """No active schedule: nothing to wait for (None), not a period due now; a paused one
    counts as none, and an active one says how long until its period."""
    assert await seconds_until_due(fresh_db) is None
    schedule = await new(fresh_db, every="1h")
    assert 3500 < (await seconds_until_due(fresh_db) or 0) <= 3600
    assert await seconds_until_due(fresh_db, excluding=[schedule.id]) is None
    await due_since(fresh_db, schedule, 30)
    assert await seconds_until_due(fresh_db) == 0


async def test_many_schedulers_firing_one_period_at_once_make_one_run(fresh_db: Database) -> None:
    """Eight fires of one due period at once (as eight replicas would) insert one task,
    whose id names the schedule and the period, and move the schedule past now once."""
    schedule = await new(fresh_db)
    await due_since(fresh_db, schedule, 1)
    fired = await asyncio.gather(
        *(fire_schedule(fresh_db, schedule.id, plan, late_seconds=LATE) for _ in range(8))
    )
    made = [f for f in fired if f is not None and f.created]
    assert len(made) == 1 and made[0].task_id == run_task_id(schedule.id, made[0].period)
    assert await runs(fresh_db, schedule) == [made[0].task_id]
    after = await get_schedule(fresh_db, schedule.id)
    assert after.next_run_at is not None and after.next_run_at > datetime.now().astimezone()
    assert after.last_task_id == made[0].task_id


async def test_a_crash_while_firing_leaves_the_period_to_fire_once_later(
    fresh_db: Database,
) -> None:
    """A fire that dies after inserting the run (here: its planner raises) rolls back
    the run and the schedule's move together; the next fire makes the one run."""
    schedule = await new(fresh_db)
    await due_since(fresh_db, schedule, 1)

    def crash(s: StoredSchedule, period: datetime) -> ScheduledRun:
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        await fire_schedule(fresh_db, schedule.id, crash, late_seconds=LATE)
    assert await runs(fresh_db, schedule) == []
    fired = await fire_schedule(fresh_db, schedule.id, plan, late_seconds=LATE)
    assert fired is not None and fired.created
    assert await runs(fresh_db, schedule) == [fired.task_id]


async def test_a_period_inserted_twice_is_one_task(fresh_db: Database) -> None:
    """Should a period be fired again (its schedule set back to it), its task id is the
    same and the second insert does nothing."""
    schedule = await new(fresh_db)
    await due_since(fresh_db, schedule, 1)
    first = await fire_schedule(fresh_db, schedule.id, plan, late_seconds=LATE)
    assert first is not None
    await fresh_db.pool.execute(
        "UPDATE schedules SET next_run_at = $2 WHERE id = $1", int(schedule.id), first.period
    )
    again = await fire_schedule(fresh_db, schedule.id, plan, late_seconds=LATE)
    assert again is not None and again.task_id == first.task_id and not again.created
    assert await runs(fresh_db, schedule) == [first.task_id]


async def test_missed_periods_are_caught_up_by_one_run(fresh_db: Database) -> None:
    """Down for ten periods, a catching-up schedule runs once, for the latest of them."""
    schedule = await new(fresh_db)
    await due_since(fresh_db, schedule, 100)
    fired = await fire_schedule(fresh_db, schedule.id, plan, late_seconds=LATE)
    assert fired is not None and fired.created
    now = datetime.now().astimezone()
    assert now - timedelta(seconds=11) < fired.period <= now
    assert await fire_schedule(fresh_db, schedule.id, plan, late_seconds=LATE) is None
    assert len(await runs(fresh_db, schedule)) == 1


async def test_missed_periods_of_a_skipping_schedule_are_not_run(fresh_db: Database) -> None:
    """Down past `late_seconds`, a schedule that skips runs nothing for what it missed and
    counts the skip; seen in time, its period runs."""
    schedule = await new(fresh_db, every="1h", missed="skip")
    await due_since(fresh_db, schedule, 3700)  # its latest period started 100 s ago
    fired = await fire_schedule(fresh_db, schedule.id, plan, late_seconds=5)
    assert fired is not None and fired.skipped and fired.task_id is None
    assert await runs(fresh_db, schedule) == []
    assert (await get_schedule(fresh_db, schedule.id)).skipped == 1
    await due_since(fresh_db, schedule, 1)
    on_time = await fire_schedule(fresh_db, schedule.id, plan, late_seconds=5)
    assert on_time is not None and on_time.created


async def test_a_one_time_schedule_runs_once_and_is_done(fresh_db: Database) -> None:
    """`--at`: one run, then the schedule is done and never due again."""
    at = datetime.now().astimezone() + timedelta(hours=1)
    schedule = await new(fresh_db, recurrence=recur_once(at))
    assert schedule.next_run_at == at.replace(microsecond=0)
    await fresh_db.pool.execute(  # its time has come
        "UPDATE schedules SET at = now(), next_run_at = now() WHERE id = $1", int(schedule.id)
    )
    fired = await fire_schedule(fresh_db, schedule.id, plan, late_seconds=LATE)
    assert fired is not None and fired.created
    done = await get_schedule(fresh_db, schedule.id)
    assert done.state == "done" and done.next_run_at is None


async def test_the_last_outcome_is_read_from_the_run(fresh_db: Database) -> None:
    """queued while waiting, running while leased, silent when done without a reply,
    failed when it failed."""
    schedule = await new(fresh_db)
    await due_since(fresh_db, schedule, 1)
    await fire_schedule(fresh_db, schedule.id, plan, late_seconds=LATE)
    assert (await get_schedule(fresh_db, schedule.id)).last_outcome == "queued"
    queue = PostgresTaskQueue(fresh_db)
    task = await queue.claim()
    assert isinstance(task, Task) and task.schedule_id == schedule.id
    assert (await get_schedule(fresh_db, schedule.id)).last_outcome == "running"
    await queue.finish(task)
    assert (await get_schedule(fresh_db, schedule.id)).last_outcome == "silent"
    await due_since(fresh_db, schedule, 5)  # a later period
    await fire_schedule(fresh_db, schedule.id, plan, late_seconds=LATE)
    second = await queue.claim()
    assert second is not None
    await queue.fail(second, "RoundFailed: no")
    failed = await get_schedule(fresh_db, schedule.id)
    assert failed.last_outcome == "failed" and failed.last_error == "RoundFailed: no"


async def test_pause_stops_and_resume_restarts_from_the_next_period(fresh_db: Database) -> None:
    """A paused schedule is never due; resumed, its next period is after now (what it was
    paused for is not run)."""
    schedule = await new(fresh_db)
    await pause_schedule(fresh_db, schedule.id, by="test", reason="holiday")
    await due_since(fresh_db, schedule, 100)
    assert await fire_schedule(fresh_db, schedule.id, plan, late_seconds=LATE) is None
    resumed = await resume_schedule(fresh_db, schedule.id)
    assert resumed.state == "active" and resumed.paused_reason is None
    assert resumed.next_run_at is not None and resumed.next_run_at > datetime.now().astimezone()


async def test_a_person_deletes_only_their_own(fresh_db: Database) -> None:
    """Deleting as another owner changes nothing; as the owner (or an operator) it goes."""
    schedule = await new(fresh_db, owner="T1:U1")
    assert not await delete_schedule(fresh_db, schedule.id, owner="T1:U2")
    assert [s.id for s in await list_schedules(fresh_db, owner="T1:U1")] == [schedule.id]
    assert await list_schedules(fresh_db, owner="T1:U2") == []
    assert await delete_schedule(fresh_db, schedule.id, owner="T1:U1")
    with pytest.raises(UnknownSchedule):
        await get_schedule(fresh_db, schedule.id)


async def test_an_uninstalled_workspace_pauses_its_schedules(fresh_db: Database) -> None:
    """Every active schedule of the workspace is paused with the reason; others run on."""
    ours, theirs = await new(fresh_db), await new(fresh_db, team="T2")
    assert await pause_workspace(fresh_db, "T1", None, "uninstalled") == 1
    assert (await get_schedule(fresh_db, ours.id)).paused_reason == "uninstalled"
    assert (await get_schedule(fresh_db, theirs.id)).state == "active"


async def test_a_schedule_id_that_is_no_number_names_no_schedule(fresh_db: Database) -> None:
    """An id that is not a number is an `UnknownSchedule`, not a database error."""
    with pytest.raises(UnknownSchedule):
        await get_schedule(fresh_db, "1; DROP TABLE schedules")
