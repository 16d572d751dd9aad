"""A person's schedule, asked for and confirmed: stored pending, capped, and decided by its owner.

What a conversation asks for outlives the message that asked, so it does not run on the
model's word: `ask_schedule` stores it 'pending' (migration 028) and only its owner's
Approve makes it 'active' (`decide_schedule`); Deny, or no decision before its deadline,
and it never runs. Any text the model read (another member's message, a file, a fetched
page) can make it call `schedule_create`; the owner sees who asked and from which message,
and says whether they did.

The caps (`ScheduleCaps`) count a person's schedules and people's schedules in a channel
that are active or pending (a lapsed pending one is neither), in the transaction that
stores the new one, after taking a lock per owner and per channel (advisory, owner first,
so two transactions never wait on each other in a circle): two replicas storing a
person's fifth and sixth at once take turns, and the second is refused. A schedule in a
person's DM counts only against the person's cap.

A round retried after a crash asks again with the same arguments: the schedule its first
try stored (same asking task, same request) is found and returned, not stored twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

from storage.database import SCHEDULES_CHANNEL, Database
from storage.errors import StorageError, translate_errors
from storage.migrations import Connection
from storage.schedules import (
    NewSchedule,
    StoredSchedule,
    get_schedule,
    insert_schedule,
    schedule_number,
    schedule_of,
)

CapScope: TypeAlias = Literal["person", "channel"]
Decided: TypeAlias = Literal["approved", "denied", "timed_out", "already", "unknown"]


@dataclass(frozen=True, slots=True)
class ScheduleCaps:
    """How many schedules, active or pending, one person may have, and people in one
    channel together."""

    per_person: int = 5
    per_channel: int = 10


class ScheduleCapReached(StorageError):
    """The person, or the channel, has as many schedules as the caps allow."""

    def __init__(self, scope: CapScope, cap: int) -> None:
        self.scope = scope
        self.cap = cap
        whose = "this person has" if scope == "person" else "people in this channel have"
        super().__init__(
            f"Not created: {whose} {cap} schedules active or waiting for approval, the most "
            "allowed. Delete one first (schedule_list shows them, schedule_delete removes one)."
        )


_COUNTED = "(s.state = 'active' OR (s.state = 'pending' AND s.approval_deadline > now()))"
_PERSON = f"SELECT count(*) FROM schedules s WHERE s.owner = $1 AND {_COUNTED}"
_CHANNEL = (
    "SELECT count(*) FROM schedules s WHERE s.team = $1 AND s.channel = $2 "
    f"AND s.owner IS NOT NULL AND s.target <> 'dm' AND {_COUNTED}"
)
_ASKED_BEFORE = """
SELECT id FROM schedules
WHERE asked_task = $1 AND owner = $2 AND prompt = $3 AND kind = $4 AND target = $5
  AND every_seconds IS NOT DISTINCT FROM $6 AND cron IS NOT DISTINCT FROM $7
  AND at IS NOT DISTINCT FROM $8 AND time_zone = $9
ORDER BY id LIMIT 1
"""
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"

# The owner's decision on a pending schedule: approved, it is planned from now on.
_LOCK_PENDING = "SELECT s.*, now() AS now FROM schedules s WHERE s.id = $1 FOR UPDATE"
_APPROVE = """
UPDATE schedules SET state = CASE WHEN $2::timestamptz IS NULL THEN 'done' ELSE 'active' END,
       anchor_at = $3, next_run_at = $2, decided_by = $4, decided_at = now(), updated_at = now()
WHERE id = $1
"""
_DENY = """
UPDATE schedules SET state = 'denied', decided_by = $2, decided_at = now(), updated_at = now()
WHERE id = $1
"""


@translate_errors("The schedule could not be stored")
async def ask_schedule(
    db: Database, new: NewSchedule, caps: ScheduleCaps, *, approval_seconds: float
) -> StoredSchedule:
    """Store a person's schedule pending its owner's approval for `approval_seconds`,
    within `caps` (`ScheduleCapReached`); the one stored before when the same task asked
    for the same schedule."""
    assert new.owner is not None and new.asked is not None, "a person's schedule"
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute(_LOCK, f"threadgate schedules of {new.owner}")
        if (before := await _asked_before(conn, new)) is not None:
            return await get_schedule(db, before)
        await _check_caps(conn, new, caps)
        created = await insert_schedule(conn, new, approval_seconds=approval_seconds)
        await conn.execute("SELECT pg_notify($1, '')", SCHEDULES_CHANNEL)
    return await get_schedule(db, created)


async def _asked_before(conn: Connection, new: NewSchedule) -> str | None:
    r = new.recurrence
    assert new.asked is not None
    found = await conn.fetchval(
        _ASKED_BEFORE,
        *(new.asked.task_id, new.owner, new.prompt, r.kind, new.target),
        *(r.every_seconds, r.cron, r.at, r.time_zone),
    )
    return None if found is None else str(found)


async def _check_caps(conn: Connection, new: NewSchedule, caps: ScheduleCaps) -> None:
    if await conn.fetchval(_PERSON, new.owner) >= caps.per_person:
        raise ScheduleCapReached("person", caps.per_person)
    if new.target == "dm" or new.channel is None:
        return
    await conn.execute(_LOCK, f"threadgate schedules in {new.team}:{new.channel}")
    if await conn.fetchval(_CHANNEL, new.team, new.channel) >= caps.per_channel:
        raise ScheduleCapReached("channel", caps.per_channel)


@translate_errors("The decision could not be recorded")
async def decide_schedule(
    db: Database, schedule_id: str, verdict: Literal["approved", "denied"], who: str
) -> Decided:
    """Record `who`'s decision on a pending schedule (whether they may decide is the
    caller's to say): approved, it runs from its first period after now; "timed_out"
    when its deadline passed (it is denied now); "already" when it is not pending;
    "unknown" when there is no such schedule."""
    async with db.pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(_LOCK_PENDING, schedule_number(schedule_id))
        if row is None:
            return "unknown"
        if row["state"] != "pending":
            return "already"
        if row["approval_deadline"] is not None and row["approval_deadline"] <= row["now"]:
            await conn.execute(_DENY, row["id"], None)
            decided: Decided = "timed_out"
        elif verdict == "approved":
            now = await conn.fetchval("SELECT date_trunc('second', now())")
            first = schedule_of(row).recurrence.after(now, anchor=now)
            await conn.execute(_APPROVE, row["id"], first, now, who)
            decided = "approved"
        else:
            await conn.execute(_DENY, row["id"], who)
            decided = "denied"
        await conn.execute("SELECT pg_notify($1, '')", SCHEDULES_CHANNEL)
    return decided


@dataclass(frozen=True, slots=True)
class ScheduleCensus:
    """What `threadgate doctor` says of people's schedules: how many are active, waiting
    for their owner, paused; and those that slip past today's bounds — active without an
    owner's approval (made before approvals were asked for), more often than the person
    minimum allows, or owners and channels over their caps (the caps were lowered since,
    or an operator resumed one)."""

    active: int
    pending: int
    paused: int
    unapproved: int
    too_often: list[str]
    owners_over: int
    channels_over: int


_CENSUS = f"""
SELECT count(*) FILTER (WHERE s.state = 'active') AS active,
       count(*) FILTER (WHERE s.state = 'pending' AND s.approval_deadline > now()) AS pending,
       count(*) FILTER (WHERE s.state = 'paused') AS paused,
       count(*) FILTER (WHERE s.state = 'active' AND s.decided_at IS NULL) AS unapproved,
       (SELECT count(*) FROM (SELECT 1 FROM schedules s WHERE s.owner IS NOT NULL AND {_COUNTED}
                              GROUP BY s.owner HAVING count(*) > $1) o) AS owners_over,
       (SELECT count(*) FROM (SELECT 1 FROM schedules s
                              WHERE s.owner IS NOT NULL AND s.target <> 'dm' AND {_COUNTED}
                              GROUP BY s.team, s.channel HAVING count(*) > $2) c) AS channels_over
FROM schedules s WHERE s.owner IS NOT NULL
"""
_ACTIVE = "SELECT s.*, NULL AS last_outcome FROM schedules s WHERE s.owner IS NOT NULL AND s.state = 'active' LIMIT 10000"


@translate_errors("People's schedules could not be read")
async def schedule_census(
    db: Database, caps: ScheduleCaps, too_often: Callable[[StoredSchedule], bool]
) -> ScheduleCensus:
    """Count people's schedules (`ScheduleCensus`); `too_often` says which active ones run
    more often than people's may."""
    row = await db.pool.fetchrow(_CENSUS, caps.per_person, caps.per_channel)
    assert row is not None
    active = [schedule_of(r) for r in await db.pool.fetch(_ACTIVE)]
    return ScheduleCensus(
        active=row["active"],
        pending=row["pending"],
        paused=row["paused"],
        unapproved=row["unapproved"],
        too_often=[s.id for s in active if too_often(s)],
        owners_over=row["owners_over"],
        channels_over=row["channels_over"],
    )
