"""People's schedules in Postgres: stored pending until their owner approves, never due
before, capped per person and per channel however many ask at once, and asked for once
per task."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

from agent import recur_every, recur_once
from storage import (
    AskedIn,
    Database,
    NewSchedule,
    ScheduleCapReached,
    ScheduleCaps,
    ask_schedule,
    decide_schedule,
    due_schedules,
    get_schedule,
    list_schedules,
    seconds_until_due,
)

CAPS = ScheduleCaps(per_person=5, per_channel=10)
HOUR = 3600.0


def asking(user: str = "U1", channel: str = "C1", n: int = 1, **fields: object) -> NewSchedule:
    """A person's schedule as the book stores it, asked from message `1700000000.00000n`."""
    ts = f"1700000000.{n:06d}"
    base = NewSchedule(
        team="T1",
        target="channel",
        prompt=f"digest {n}",
        recurrence=recur_every("1h"),
        created_by=user,
        channel=channel,
        owner=f"T1:{user}",
        asked=AskedIn(f"T1:{channel}:{ts}", channel, ts),
    )
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


async def test_a_persons_schedule_waits_pending_and_is_never_due_before_approval(
    fresh_db: Database,
) -> None:
    """Stored pending with who asked and from which message; no period is planned, so no
    scheduler finds it due or waits for it."""
    stored = await ask_schedule(fresh_db, asking(), CAPS, approval_seconds=HOUR)
    assert stored.state == "pending" and stored.next_run_at is None
    assert stored.asked == AskedIn("T1:C1:1700000000.000001", "C1", "1700000000.000001")
    assert stored.origin == "U1 in message C1/1700000000.000001"
    assert stored.approval_deadline is not None and not stored.lapsed
    await fresh_db.pool.execute("UPDATE schedules SET next_run_at = now() - interval '1 hour'")
    assert await due_schedules(fresh_db) == []
    assert await seconds_until_due(fresh_db) is None


async def test_the_owners_approval_plans_it_from_now_and_a_second_decision_is_already(
    fresh_db: Database,
) -> None:
    """Approved, it is active with its first period after now and who decided; a later
    deny changes nothing ("already")."""
    stored = await ask_schedule(fresh_db, asking(), CAPS, approval_seconds=HOUR)
    assert await decide_schedule(fresh_db, stored.id, "approved", "U1") == "approved"
    approved = await get_schedule(fresh_db, stored.id)
    assert approved.state == "active" and approved.next_run_at is not None
    assert (approved.decided_by, approved.decided_at is not None) == ("U1", True)
    assert await decide_schedule(fresh_db, stored.id, "denied", "U1") == "already"
    assert (await get_schedule(fresh_db, stored.id)).state == "active"


async def test_denied_or_lapsed_it_never_runs_and_frees_its_place(fresh_db: Database) -> None:
    """A denial, or a click past the deadline (which denies it), leaves it never due; a
    lapsed pending schedule is not counted against the caps."""
    caps = ScheduleCaps(per_person=1, per_channel=10)
    denied = await ask_schedule(fresh_db, asking(n=1), caps, approval_seconds=HOUR)
    assert await decide_schedule(fresh_db, denied.id, "denied", "U1") == "denied"
    lapsing = await ask_schedule(fresh_db, asking(n=2), caps, approval_seconds=HOUR)
    await fresh_db.pool.execute(
        "UPDATE schedules SET approval_deadline = now() - interval '1 second' WHERE id = $1",
        int(lapsing.id),
    )
    assert (await get_schedule(fresh_db, lapsing.id)).lapsed
    third = await ask_schedule(fresh_db, asking(n=3), caps, approval_seconds=HOUR)
    assert await decide_schedule(fresh_db, lapsing.id, "approved", "U1") == "timed_out"
    states = {s.id: (s.state, s.decided_by) for s in await list_schedules(fresh_db)}
    assert states == {
        denied.id: ("denied", "U1"),
        lapsing.id: ("denied", None),
        third.id: ("pending", None),
    }


async def test_a_once_schedule_approved_after_its_time_is_done_without_a_run(
    fresh_db: Database,
) -> None:
    """Approving a one-time schedule whose moment has passed plans no run: it is done."""
    soon = recur_once(datetime_in(1))
    stored = await ask_schedule(fresh_db, asking(recurrence=soon), CAPS, approval_seconds=HOUR)
    await fresh_db.pool.execute(
        "UPDATE schedules SET at = now() - interval '1 minute' WHERE id = $1", int(stored.id)
    )
    assert await decide_schedule(fresh_db, stored.id, "approved", "U1") == "approved"
    assert (await get_schedule(fresh_db, stored.id)).state == "done"


async def test_ten_asking_at_once_for_one_person_store_five_and_refuse_five(
    fresh_db: Database,
) -> None:
    """However many ask at once (as replicas would), the person's cap holds: five stored,
    each other one refused with the reason."""
    tries = await asyncio.gather(
        *(ask_schedule(fresh_db, asking(n=n), CAPS, approval_seconds=HOUR) for n in range(10)),
        return_exceptions=True,
    )
    refused = [t for t in tries if isinstance(t, ScheduleCapReached)]
    assert len(refused) == 5 and {r.scope for r in refused} == {"person"}
    assert "this person has 5 schedules active or waiting for approval" in str(refused[0])
    assert len(await list_schedules(fresh_db, owner="T1:U1")) == 5


async def test_people_in_one_channel_share_its_cap_and_a_dm_counts_only_for_its_person(
    fresh_db: Database,
) -> None:
    """Three people asking at once in a channel capped at two: two stored, one refused for
    the channel; a DM schedule of the refused person is still theirs to have."""
    caps = ScheduleCaps(per_person=5, per_channel=2)
    tries = await asyncio.gather(
        *(
            ask_schedule(fresh_db, asking(user=u), caps, approval_seconds=HOUR)
            for u in ("U1", "U2", "U3")
        ),
        return_exceptions=True,
    )
    refused = [t for t in tries if isinstance(t, ScheduleCapReached)]
    assert [r.scope for r in refused] == ["channel"]
    assert "people in this channel have 2 schedules" in str(refused[0])
    dm = asking(user="U9", target="dm", channel=None, dm_user="U9", n=7)
    for user in ("U9", "U9"):
        await ask_schedule(
            fresh_db, dataclasses.replace(dm, created_by=user), caps, approval_seconds=HOUR
        )
    assert len(await list_schedules(fresh_db, owner="T1:U9")) == 1  # the same ask, once


async def test_a_round_retried_after_a_crash_finds_the_schedule_it_asked_for(
    fresh_db: Database,
) -> None:
    """The same task asking for the same schedule again gets the stored one back; a
    different request of that task is a schedule of its own."""
    first = await ask_schedule(fresh_db, asking(), CAPS, approval_seconds=HOUR)
    again = await ask_schedule(fresh_db, asking(), CAPS, approval_seconds=HOUR)
    other = await ask_schedule(
        fresh_db, asking(prompt="something else"), CAPS, approval_seconds=HOUR
    )
    assert again.id == first.id and other.id != first.id


def datetime_in(seconds: int) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()
