"""`agent.ScheduleBook` on Postgres: the schedules people manage by asking the bot.

The owner is decided here, from the task whose round called the tool — the team and the
person its turn came from (the task's address, as the gatekeeper stored it) — never from
the model's arguments, so nobody can create, see or delete a schedule as someone else.
Where a run posts follows from the same address: `here` is the thread (or DM thread) the
request was made in, `channel` a new top-level post in its channel, `dm` the person's DM
(found by the scheduler with conversations.open).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent import ScheduleEntry, ScheduleRequest, Task
from storage.database import Database
from storage.schedules import (
    NewSchedule,
    StoredSchedule,
    Target,
    UnknownSchedule,
    create_schedule,
    delete_schedule,
    list_schedules,
)

_TARGETS: dict[str, Target] = {"here": "thread", "channel": "channel", "dm": "dm"}


class PostgresScheduleBook:
    """`agent.ScheduleBook`: the asking person's schedules, at least `minimum_seconds` apart."""

    def __init__(self, db: Database, *, minimum_seconds: int) -> None:
        self._db = db
        self._minimum = minimum_seconds

    @property
    def minimum_seconds(self) -> int:
        return self._minimum

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
        )
        return entry(await create_schedule(self._db, new))

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


def entry(schedule: StoredSchedule) -> ScheduleEntry:
    """A stored schedule as its owner sees it."""
    state = (
        f"paused ({schedule.paused_reason})"
        if schedule.state == "paused" and schedule.paused_reason
        else schedule.state
    )
    return ScheduleEntry(
        id=schedule.id,
        prompt=schedule.prompt,
        when=schedule.recurrence.describe(),
        where=schedule.where,
        state=state,
        next_run_at=schedule.next_run_at,
        last_run_at=schedule.last_run_at,
        last_outcome=schedule.last_outcome,
    )
