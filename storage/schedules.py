"""Schedules in Postgres: stored, steered, and each period fired exactly once.

A schedule is a row (migration 020); its runs are ordinary tasks. `fire` is the one
statement sequence that matters (`fire_schedule`), in one transaction: lock the schedule if its period is
due (`FOR UPDATE SKIP LOCKED`: a replica that finds it locked moves on), insert the
period's task — its id derived from the schedule and the period (`run_task_id`), so
`ON CONFLICT DO NOTHING` makes a second insert of one period a no-op — with its turn
(stored as admission stores a person's: storage/admission.py's `open_task` and
`store_turn`), then move `next_run_at` past now, and NOTIFY the workers. Two replicas, a crash anywhere
in between, or a restart can therefore never make two runs of one period.

A run is held to limits in that transaction too (`fire_schedule`'s `limits`, migration
028's `schedule_gate`): a period a limit refuses is moved past without a run, and one
whose budgets runs already in flight may spend is left due for a later look, so runs
that fire together cannot all pass before any has spent.

Periods missed while no scheduler ran (`Recurrence.latest`) are one run, for the latest of
them, when the schedule catches up; with `missed = skip` a period first seen more than
`late_seconds` after it started is not run at all (`Fired.skipped`).

A run's last outcome is not stored twice: it is read from its task (`last_task_id`) —
queued, running, posted (a reply is stored), silent (done without one), failed,
cancelled. Every change NOTIFYs `SCHEDULES_CHANNEL`, so schedulers wake for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal, TypeAlias

import asyncpg

from agent import Missed, Recurrence, RecurrenceKind, user_message_id
from storage.admission import LIMIT_SCOPES, Limits, LimitScope, open_task, store_turn
from storage.database import SCHEDULES_CHANNEL, TASKS_CHANNEL, Database
from storage.errors import StorageError, translate_errors
from storage.migrations import Connection

Target: TypeAlias = Literal["channel", "thread", "dm"]
# pending: a person's, waiting for its owner's approval (storage/schedule_consent.py);
# denied: its owner said no, or nobody decided in time.
ScheduleState: TypeAlias = Literal["pending", "active", "paused", "done", "denied"]


class UnknownSchedule(StorageError):
    """No schedule has that id (or none that the asking person owns)."""


@dataclass(frozen=True, slots=True)
class AskedIn:
    """The message a person's schedule was asked for in: its task, channel and ts."""

    task_id: str
    channel: str
    ts: str

    def __str__(self) -> str:
        return f"{self.channel}/{self.ts}"


@dataclass(frozen=True, slots=True)
class NewSchedule:
    """A schedule to store: where it posts, what it asks, how often, whose it is."""

    team: str
    target: Target
    prompt: str
    recurrence: Recurrence
    created_by: str
    channel: str | None = None
    thread_ts: str | None = None
    dm_user: str | None = None
    enterprise: str | None = None
    owner: str | None = None  # "team:user"; None: the operators'
    missed: Missed = "catch_up"
    # Who asked for it, and where: the task whose round asked, and its message.
    asked: AskedIn | None = None


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """A schedule as stored, with its last run's outcome read from that run's task."""

    id: str
    team: str
    target: Target
    prompt: str
    recurrence: Recurrence
    anchor_at: datetime
    missed: Missed
    created_by: str
    created_at: datetime
    state: ScheduleState
    channel: str | None = None
    thread_ts: str | None = None
    dm_user: str | None = None
    enterprise: str | None = None
    owner: str | None = None
    paused_reason: str | None = None
    paused_by: str | None = None
    paused_at: datetime | None = None
    next_run_at: datetime | None = None
    last_run_at: datetime | None = None
    last_task_id: str | None = None
    last_outcome: str | None = None
    last_error: str | None = None
    skipped: int = 0
    asked: AskedIn | None = None
    approval_deadline: datetime | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None

    @property
    def owner_user(self) -> str | None:
        """The owner's user id (the owner is "team:user"); None for the operators'."""
        return self.owner.split(":", 1)[-1] if self.owner else None

    @property
    def lapsed(self) -> bool:
        """Pending past its deadline: it will never run (a late click denies it)."""
        deadline = self.approval_deadline
        return self.state == "pending" and deadline is not None and deadline <= datetime.now(UTC)

    @property
    def origin(self) -> str:
        """Who asked for it, and from which message, for people."""
        if self.owner_user is None:
            return f"{self.created_by} (operators)"
        where = f" in message {self.asked}" if self.asked else ""
        return f"{self.owner_user}{where}"

    @property
    def where(self) -> str:
        """Where its runs post, for people."""
        if self.target == "thread":
            return f"thread {self.channel}/{self.thread_ts}"
        if self.target == "dm":
            return f"DM with {self.dm_user}"
        return f"channel {self.channel}"


@dataclass(frozen=True, slots=True)
class ScheduledRun:
    """What a period's task is, as the gateway plans it: its conversation, its Slack
    address, its turn (rendered), and the channel its tokens count against."""

    session_id: str
    address: Mapping[str, str]
    turn_text: str
    channel: str | None = None


@dataclass(frozen=True, slots=True)
class Fired:
    """What firing a due schedule did: ran `period` as `task_id` (`created` False when the
    task was there already), or skipped it (missed while down, `missed = skip`, or a
    limit refused it: `limited`), or left it due (`waits`: runs in flight may spend what
    its budgets have left)."""

    schedule: StoredSchedule
    period: datetime
    task_id: str | None
    created: bool = False
    skipped: bool = False
    limited: LimitScope | None = None
    waits: bool = False


Planner = Callable[[StoredSchedule, datetime], ScheduledRun]


def run_task_id(schedule_id: str, period: datetime) -> str:
    """The id of the task that runs `period` of a schedule: the same on every replica."""
    return f"schedule:{schedule_id}:{period.astimezone(UTC):%Y%m%dT%H%M%SZ}"


_COLUMNS = """
s.*, t.last_error,
CASE WHEN t.id IS NULL THEN NULL
     WHEN t.state = 'queued' THEN 'queued'
     WHEN t.state IN ('running', 'waiting') THEN 'running'
     WHEN t.state = 'done' THEN CASE WHEN EXISTS (
         SELECT 1 FROM messages m WHERE m.id = 'task:' || t.id || ':reply') THEN 'posted'
         ELSE 'silent' END
     ELSE t.state END AS last_outcome
FROM schedules s LEFT JOIN tasks t ON t.id = s.last_task_id
"""

_INSERT = """
INSERT INTO schedules (team, enterprise, target, channel, thread_ts, dm_user, prompt, kind,
                       every_seconds, cron, time_zone, at, missed, owner, created_by,
                       anchor_at, next_run_at, asked_task, asked_channel, asked_ts, state,
                       approval_deadline)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
        $20, $21, now() + make_interval(secs => $22))
RETURNING id
"""

_LOCK_DUE = """
SELECT s.*, now() AS now FROM schedules s
WHERE s.id = $1 AND s.state = 'active' AND s.next_run_at <= now()
FOR UPDATE SKIP LOCKED
"""

_ADVANCE = """
UPDATE schedules SET next_run_at = $2,
       state = CASE WHEN $2::timestamptz IS NULL THEN 'done' ELSE state END,
       last_run_at = coalesce($3, last_run_at), last_task_id = coalesce($4, last_task_id),
       skipped = skipped + $5, updated_at = now()
WHERE id = $1
"""


@translate_errors("The schedule could not be stored")
async def create_schedule(db: Database, new: NewSchedule) -> StoredSchedule:
    """Store `new`, active, its first period planned after now (an operator's; a person's
    waits for its owner: storage/schedule_consent.py)."""
    async with db.pool.acquire() as conn, conn.transaction():
        created = await insert_schedule(conn, new, approval_seconds=None)
        await _changed(conn)
    return await get_schedule(db, created)


async def insert_schedule(
    conn: Connection, new: NewSchedule, *, approval_seconds: float | None
) -> str:
    """Insert `new`: active, its first period planned after now; with `approval_seconds`,
    pending its owner's approval for that long (planned when approved). Its id."""
    r, asked = new.recurrence, new.asked
    # Whole seconds: every period starts on one, so its task id (to the second) names it.
    now = await conn.fetchval("SELECT date_trunc('second', now())")
    pending = approval_seconds is not None
    first = None if pending else r.after(now, anchor=now)
    created = await conn.fetchval(
        _INSERT,
        *(new.team, new.enterprise, new.target, new.channel, new.thread_ts, new.dm_user),
        *(new.prompt, r.kind, r.every_seconds, r.cron, r.time_zone, r.at, new.missed),
        *(new.owner, new.created_by, now, first),
        *((asked.task_id, asked.channel, asked.ts) if asked else (None, None, None)),
        "pending" if pending else "active",
        approval_seconds,
    )
    return str(created)


@translate_errors("The schedule could not be read")
async def get_schedule(db: Database, schedule_id: str) -> StoredSchedule:
    row = await db.pool.fetchrow(f"SELECT {_COLUMNS} WHERE s.id = $1", schedule_number(schedule_id))
    if row is None:
        raise UnknownSchedule(
            f"No schedule has the id {schedule_id!r}; `threadgate schedules list` shows them."
        )
    return schedule_of(row)


@translate_errors("The schedules could not be read")
async def list_schedules(
    db: Database, *, owner: str | None = None, limit: int = 200
) -> list[StoredSchedule]:
    """Schedules oldest first; only `owner`'s when given."""
    rows = await db.pool.fetch(
        f"SELECT {_COLUMNS} WHERE ($1::text IS NULL OR s.owner = $1) ORDER BY s.id LIMIT $2",
        owner,
        limit,
    )
    return [schedule_of(row) for row in rows]


@translate_errors("The schedule could not be deleted")
async def delete_schedule(db: Database, schedule_id: str, *, owner: str | None = None) -> bool:
    """Delete it (only if `owner`'s, when given); a run already under way finishes."""
    async with db.pool.acquire() as conn, conn.transaction():
        return await delete_schedule_on(conn, schedule_id, owner=owner)


async def delete_schedule_on(conn: Connection, schedule_id: str, *, owner: str | None) -> bool:
    """`delete_schedule` in the caller's transaction."""
    done = await conn.fetchval(
        "DELETE FROM schedules WHERE id = $1 AND ($2::text IS NULL OR owner = $2) RETURNING true",
        schedule_number(schedule_id),
        owner,
    )
    await _changed(conn)
    return bool(done)


@translate_errors("The schedule could not be paused")
async def pause_schedule(
    db: Database, schedule_id: str, *, by: str, reason: str | None = None
) -> StoredSchedule:
    """Pause it: no period runs until it is resumed. Pausing a paused one changes nothing."""
    await _update(
        db,
        "UPDATE schedules SET state = 'paused', paused_reason = $2, paused_by = $3, "
        "paused_at = now(), updated_at = now() WHERE id = $1 AND state = 'active'",
        schedule_id,
        reason,
        by,
    )
    return await get_schedule(db, schedule_id)


@translate_errors("The schedule could not be resumed")
async def resume_schedule(db: Database, schedule_id: str) -> StoredSchedule:
    """Resume a paused schedule at its first period after now (those it was paused for
    are not run); one whose only run is past is done."""
    async with db.pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            "SELECT s.*, now() AS now FROM schedules s WHERE id = $1 FOR UPDATE",
            schedule_number(schedule_id),
        )
        if row is None:
            raise UnknownSchedule(f"No schedule has the id {schedule_id!r}.")
        if row["state"] == "paused":
            schedule = schedule_of(row)
            following = schedule.recurrence.after(row["now"], anchor=schedule.anchor_at)
            await conn.execute(
                "UPDATE schedules SET state = CASE WHEN $2::timestamptz IS NULL THEN 'done' "
                "ELSE 'active' END, next_run_at = $2, paused_reason = NULL, paused_by = NULL, "
                "paused_at = NULL, updated_at = now() WHERE id = $1",
                schedule_number(schedule_id),
                following,
            )
            await _changed(conn)
    return await get_schedule(db, schedule_id)


@translate_errors("The schedule could not be paused")
async def pause_unrunnable(db: Database, schedule_id: str, reason: str) -> bool:
    """Pause an active schedule that cannot run (its channel is gone); True if this did."""
    return await _update(
        db,
        "UPDATE schedules SET state = 'paused', paused_reason = $2, paused_by = 'threadgate', "
        "paused_at = now(), updated_at = now() WHERE id = $1 AND state = 'active'",
        schedule_id,
        reason,
    )


@translate_errors("The workspace's schedules could not be paused")
async def pause_workspace(db: Database, team: str, enterprise: str | None, reason: str) -> int:
    """Pause every active schedule of a workspace (the app was uninstalled there)."""
    async with db.pool.acquire() as conn, conn.transaction():
        status = await conn.execute(
            "UPDATE schedules SET state = 'paused', paused_reason = $3, "
            "paused_by = 'threadgate', paused_at = now(), updated_at = now() "
            "WHERE team = $1 AND enterprise IS NOT DISTINCT FROM $2 AND state = 'active'",
            team,
            enterprise,
            reason,
        )
        await _changed(conn)
    return int(status.split()[-1])


@translate_errors("The schedule's DM could not be stored")
async def set_dm_channel(db: Database, schedule_id: str, channel: str) -> None:
    """Remember the DM channel conversations.open found for a schedule's person."""
    await db.pool.execute(
        "UPDATE schedules SET channel = $2 WHERE id = $1", schedule_number(schedule_id), channel
    )


@translate_errors("The due schedules could not be read")
async def due_schedules(db: Database, *, limit: int = 100) -> list[StoredSchedule]:
    """Active schedules whose next period has started, earliest first (not locked)."""
    rows = await db.pool.fetch(
        f"SELECT {_COLUMNS} WHERE s.state = 'active' AND s.next_run_at <= now() "
        "ORDER BY s.next_run_at LIMIT $1",
        limit,
    )
    return [schedule_of(row) for row in rows]


@translate_errors("The next due schedule could not be read")
async def seconds_until_due(db: Database, *, excluding: Sequence[str] = ()) -> float | None:
    """Seconds until the earliest active period starts (0 if one has), of the schedules
    not `excluding`; None: none will."""
    # Clamped here, not with SQL's greatest(): that skips NULLs, so no schedule at all read
    # as "one due now" and the scheduler looked again at once, a hot loop on an idle gateway.
    value = await db.pool.fetchval(
        "SELECT extract(epoch FROM min(next_run_at) - now())::float8 "
        "FROM schedules WHERE state = 'active' AND NOT (id = ANY($1::bigint[]))",
        [schedule_number(i) for i in excluding],
    )
    return None if value is None else max(0.0, float(value))


@translate_errors("The schedule could not be fired")
async def fire_schedule(
    db: Database,
    schedule_id: str,
    plan: Planner,
    *,
    late_seconds: float,
    limits: Limits | None = None,
) -> Fired | None:
    """Run the schedule's due period (module docstring) within `limits` (the run's
    channel's: `_gate`), or move past it without a run (missed, or a limit refuses it),
    or leave it due (`Fired.waits`); None when it is not due or another scheduler holds it."""
    async with db.pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(_LOCK_DUE, schedule_number(schedule_id))
        if row is None:
            return None
        schedule, now = schedule_of(row), row["now"]
        r, anchor = schedule.recurrence, schedule.anchor_at
        assert schedule.next_run_at is not None  # due
        period = r.latest(schedule.next_run_at, now, anchor=anchor)
        following = r.after(max(period, now), anchor=anchor)
        if schedule.missed == "skip" and (now - period).total_seconds() > late_seconds:
            await conn.execute(_ADVANCE, schedule_number(schedule_id), following, None, None, 1)
            return Fired(schedule, period, None, skipped=True)
        run = plan(schedule, period)
        gate = None if limits is None else await _gate(conn, schedule, run, limits)
        if gate is not None and gate.limited is not None:
            await conn.execute(_ADVANCE, schedule_number(schedule_id), following, None, None, 1)
            return Fired(schedule, period, None, skipped=True, limited=gate.limited)
        if gate is not None and gate.waits:
            return Fired(schedule, period, None, waits=True)
        task_id = run_task_id(schedule.id, period)
        created = await _insert_run(conn, schedule, task_id, run)
        if created and gate is not None:
            await conn.execute(_HOLD, task_id, gate.hold_tokens, gate.hold_usd)
        await conn.execute(_ADVANCE, schedule_number(schedule_id), following, period, task_id, 0)
        await conn.execute("SELECT pg_notify($1, '')", TASKS_CHANNEL)
    return Fired(schedule, period, task_id, created=created)


@dataclass(frozen=True, slots=True)
class _Gate:
    limited: LimitScope | None
    waits: bool
    hold_tokens: int | None
    hold_usd: Decimal | None


_GATE = "SELECT * FROM schedule_gate($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
# What a run of a schedule that never ran is assumed to spend, until it has: held against
# its budgets while in flight (`_gate`). Generous for a digest, small beside a daily budget
# (a channel's is 10,000,000 tokens by default), so runs fire together unless a budget is
# nearly spent; a schedule's own runs replace it from its first finished run on.
UNKNOWN_RUN_TOKENS = 50_000
UNKNOWN_RUN_USD = Decimal("0.50")
_HOLD = "UPDATE tasks SET hold_tokens = $2, hold_usd = $3 WHERE id = $1"


async def _gate(
    conn: Connection, schedule: StoredSchedule, run: ScheduledRun, limits: Limits
) -> _Gate:
    """Whether the run may go now (migration 028's `schedule_gate`): held to its owner's,
    its channel's and its workspace's limits like a person's message, and to what the
    runs in flight against the same budgets are expected to spend. An operator's schedule
    has no owner, and its thread's hour is not counted: it may run at any period."""
    person = schedule.owner is not None
    row = await conn.fetchrow(
        _GATE,
        schedule_number(schedule.id),
        schedule.owner,
        run.session_id,
        run.channel,
        schedule.team,
        limits.user_messages_per_hour if person else 0,
        limits.thread_messages_per_hour if person else 0,
        limits.user_daily_tokens,
        limits.channel_daily_tokens,
        limits.all_daily_tokens,
        Decimal(str(limits.channel_daily_spend_usd)),
        Decimal(str(limits.workspace_daily_spend_usd)),
        UNKNOWN_RUN_TOKENS,
        UNKNOWN_RUN_USD,
    )
    assert row is not None
    limited = next((s for s in LIMIT_SCOPES if s == row["limited"]), None)
    return _Gate(limited, bool(row["waits"]), row["hold_tokens"], row["hold_usd"])


async def _insert_run(
    conn: Connection, schedule: StoredSchedule, task_id: str, run: ScheduledRun
) -> bool:
    """The period's task and its turn, stored as admission stores a person's."""
    created = await open_task(
        conn,
        session_id=run.session_id,
        task_id=task_id,
        address=run.address,
        user=schedule.owner,
        channel=run.channel,
        schedule=schedule_number(schedule.id),
    )
    if created:
        await store_turn(conn, user_message_id(task_id), run.session_id, run.turn_text)
    return created


async def _update(db: Database, sql: str, schedule_id: str, *args: object) -> bool:
    async with db.pool.acquire() as conn, conn.transaction():
        if not await conn.fetchval(
            "SELECT true FROM schedules WHERE id = $1", schedule_number(schedule_id)
        ):
            raise UnknownSchedule(f"No schedule has the id {schedule_id!r}.")
        status = await conn.execute(sql, schedule_number(schedule_id), *args)
        await _changed(conn)
    return bool(status != "UPDATE 0")


async def _changed(conn: Connection) -> None:
    await conn.execute("SELECT pg_notify($1, '')", SCHEDULES_CHANNEL)


def schedule_number(schedule_id: str) -> int:
    """A schedule id as the table keys it; anything else names no schedule."""
    text = schedule_id.strip().lstrip("#")
    if not text.isdigit() or len(text) > 18:
        raise UnknownSchedule(f"{schedule_id[:40]!r} is not a schedule id (they are numbers).")
    return int(text)


def schedule_of(row: asyncpg.Record) -> StoredSchedule:
    kind: RecurrenceKind = row["kind"]
    recurrence = Recurrence(kind, row["every_seconds"], row["cron"], row["time_zone"], row["at"])
    return StoredSchedule(
        id=str(row["id"]),
        team=row["team"],
        target=row["target"],
        prompt=row["prompt"],
        recurrence=recurrence,
        anchor_at=row["anchor_at"],
        missed=row["missed"],
        created_by=row["created_by"],
        created_at=row["created_at"],
        state=row["state"],
        channel=row["channel"],
        thread_ts=row["thread_ts"],
        dm_user=row["dm_user"],
        enterprise=row["enterprise"],
        owner=row["owner"],
        paused_reason=row["paused_reason"],
        paused_by=row["paused_by"],
        paused_at=row["paused_at"],
        next_run_at=row["next_run_at"],
        last_run_at=row["last_run_at"],
        last_task_id=row["last_task_id"],
        last_outcome=row.get("last_outcome"),
        last_error=row.get("last_error"),
        skipped=row["skipped"],
        asked=(
            AskedIn(row["asked_task"], row["asked_channel"], row["asked_ts"])
            if row["asked_task"] and row["asked_channel"] and row["asked_ts"]
            else None
        ),
        approval_deadline=row["approval_deadline"],
        decided_by=row["decided_by"],
        decided_at=row["decided_at"],
    )
