"""A click on a schedule's Approve or Deny: only its owner decides.

A schedule a conversation asked for waits for its owner (storage/schedule_consent.py); the
buttons of the message that asks (gateway/delivery/schedule_approval.py) carry its id.
Only the owner decides, not `THREADGATE_APPROVERS` as for a tool call: the question is
whether *they* asked for something that runs in their name, on their budget, for as long
as it lives, and nobody else can answer it. Anyone else's click changes nothing and they
are told so privately; so is a click on a schedule decided before, or on one whose
deadline passed (which denies it). A decision is stored before the click is acked; the
message is updated to show it in the background (`ShowScheduleDecision`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from agent import Supervisor
from storage import (
    Database,
    StoredSchedule,
    UnknownSchedule,
    decide_schedule,
    get_schedule,
)

# Shows a schedule's decision on the message that asked (delivery's
# `ScheduleApprovals.show`, wired by the composition root).
ShowScheduleDecision: TypeAlias = Callable[
    [StoredSchedule, str, str | None], Coroutine[Any, Any, None]
]
ScheduleOutcome: TypeAlias = Literal[
    "approved", "denied", "timed_out", "refused", "already", "unknown"
]

NOT_OWNER = (
    "Only <@{owner}>, whose schedule it is, can approve or deny it; your click changed nothing."
)
ALREADY = "This schedule was already decided (it is {state}); your click changed nothing."
LAPSED = "Nobody approved this schedule in time, so it never runs. Ask the bot again to make it."


@dataclass(frozen=True, slots=True)
class ScheduleClick:
    """What a click did, the schedule it named, and what to tell the clicker privately."""

    outcome: ScheduleOutcome
    schedule: StoredSchedule | None = None
    note: str | None = None


class ScheduleClicks:
    """Decides on pending schedules (module docstring)."""

    def __init__(self, db: Database, show: ShowScheduleDecision, supervisor: Supervisor) -> None:
        self._db = db
        self._show = show
        self._supervisor = supervisor

    async def decide(
        self, user: str, schedule_id: str, verdict: Literal["approved", "denied"]
    ) -> ScheduleClick:
        try:
            schedule = await get_schedule(self._db, schedule_id)
        except UnknownSchedule:
            return ScheduleClick("unknown")
        if user != schedule.owner_user:
            return ScheduleClick("refused", schedule, NOT_OWNER.format(owner=schedule.owner_user))
        decided = await decide_schedule(self._db, schedule_id, verdict, user)
        if decided == "unknown":  # deleted since
            return ScheduleClick("unknown")
        if decided == "already":
            return ScheduleClick("already", schedule, ALREADY.format(state=schedule.state))
        by = None if decided == "timed_out" else user
        self._supervisor.spawn(
            self._show(schedule, decided, by), name=f"show-schedule-{schedule.id}"
        )
        return ScheduleClick(decided, schedule, LAPSED if decided == "timed_out" else None)
