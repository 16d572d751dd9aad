"""`agent.ScheduleBook` on Postgres: the schedules people manage by asking the bot.

The owner is decided here, from the task whose round called the tool — the team and the
person its turn came from (the task's address, as the gatekeeper stored it) — never from
the model's arguments, so nobody can create, see or delete a schedule as someone else.
Where a run posts follows from the same address: `here` is the thread (or DM thread) the
request was made in, `channel` a new top-level post in its channel, `dm` the person's DM
(found by the scheduler with conversations.open).

A schedule made here is a person's (`PersonSchedules` bounds it): stored pending its
owner's approval, with the message that asked (storage/schedule_consent.py), within the
caps, and at least `minimum_seconds` apart — the operators' CLI keeps its own minimum.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agent import (
    DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    ScheduleEntry,
    ScheduleRefused,
    ScheduleRequest,
    Task,
)
from storage.database import Database
from storage.schedule_consent import ScheduleCapReached, ScheduleCaps, ask_schedule
from storage.schedules import (
    AskedIn,
    NewSchedule,
    StoredSchedule,
    Target,
    UnknownSchedule,
    delete_schedule,
    list_schedules,
)

_TARGETS: dict[str, Target] = {"here": "thread", "channel": "channel", "dm": "dm"}
_SLACK_TS = re.compile(r"\d+\.\d+")


@dataclass(frozen=True, slots=True)
class PersonSchedules:
    """The bounds of the schedules people make by asking: the shortest period (an hour
    by default: a conversation's schedule has no reason to run every minute), the caps,
    and how long a pending one waits for its owner (as long as a tool call would)."""

    minimum_seconds: int = 3600
    caps: ScheduleCaps = field(default_factory=ScheduleCaps)
    approval_seconds: float = DEFAULT_APPROVAL_TIMEOUT_SECONDS


# The defaults, which the settings (gateway/config/groups.py) take from here.
DEFAULT_PERSON_SCHEDULES = PersonSchedules()


class PostgresScheduleBook:
    """`agent.ScheduleBook`: the asking person's schedules, within `bounds`; `on_refused`
    hears of each one a cap refused ("person" or "channel")."""

    def __init__(
        self,
        db: Database,
        bounds: PersonSchedules,
        *,
        on_refused: Callable[[str], None] = lambda scope: None,
    ) -> None:
        self._db = db
        self._bounds = bounds
        self._on_refused = on_refused

    @property
    def minimum_seconds(self) -> int:
        return self._bounds.minimum_seconds

    async def create(self, task: Task, request: ScheduleRequest) -> ScheduleEntry:
        a = task.address
        target = _TARGETS[request.where]
        new = NewSchedule(
            team=a["team"],
            target=target,
            prompt=request.prompt,
            recurrence=request.recurrence,
            created_by=a["user"],
            channel=a["channel"] if target != "dm" else None,
            thread_ts=a["thread_ts"] if target == "thread" else None,
            dm_user=a["user"] if target == "dm" else None,
            enterprise=a.get("enterprise"),
            owner=_owner(task),
            missed=request.missed,
            asked=asked_in(task),
        )
        bounds = self._bounds
        try:
            stored = await ask_schedule(
                self._db, new, bounds.caps, approval_seconds=bounds.approval_seconds
            )
        except ScheduleCapReached as exc:
            self._on_refused(exc.scope)
            raise ScheduleRefused(str(exc)) from exc
        return entry(stored)

    async def mine(self, task: Task) -> Sequence[ScheduleEntry]:
        return [entry(s) for s in await list_schedules(self._db, owner=_owner(task))]

    async def delete(self, task: Task, schedule_id: str) -> bool:
        try:
            return await delete_schedule(self._db, schedule_id, owner=_owner(task))
        except UnknownSchedule:  # not even an id: none of theirs
            return False


def _owner(task: Task) -> str:
    """The person whose turn the task answers, as schedules record owners ("team:user")."""
    return f"{task.address['team']}:{task.address['user']}"


def asked_in(task: Task) -> AskedIn:
    """The message the task answers: its `ts` as the gatekeeper stored it, else (a task
    from before it did) the thread it is in."""
    a = task.address
    ts = a.get("ts") or ""
    return AskedIn(task.id, a["channel"], ts if _SLACK_TS.fullmatch(ts) else a["thread_ts"])


def entry(schedule: StoredSchedule) -> ScheduleEntry:
    """A stored schedule as its owner sees it."""
    return ScheduleEntry(
        id=schedule.id,
        prompt=schedule.prompt,
        when=schedule.recurrence.describe(),
        where=schedule.where,
        state=state_of(schedule),
        next_run_at=schedule.next_run_at,
        last_run_at=schedule.last_run_at,
        last_outcome=schedule.last_outcome,
        origin=schedule.origin,
        owner=schedule.owner_user or "",
    )


def state_of(schedule: StoredSchedule) -> str:
    """Its state in words: pending (until when, or lapsed), paused (why), denied (by whom)."""
    if schedule.state == "pending" and schedule.approval_deadline is not None:
        deadline = schedule.approval_deadline.isoformat(timespec="seconds")
        if schedule.lapsed:
            return f"pending approval, lapsed at {deadline} (it will not run)"
        return f"pending its owner's approval until {deadline} (it does not run before)"
    if schedule.state == "paused" and schedule.paused_reason:
        return f"paused ({schedule.paused_reason})"
    if schedule.state == "denied":
        return f"denied by {schedule.decided_by}" if schedule.decided_by else "denied (lapsed)"
    return schedule.state
