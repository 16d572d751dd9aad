"""`threadgate doctor`'s look at people's schedules: what they are, and what slips past
today's bounds.

People's schedules are bounded when they are made (approval by their owner, the caps, the
shortest period: storage/schedule_consent.py), and the bounds can move under schedules
made before: ones made before approvals were asked for run without one, lowering a cap or
raising `THREADGATE_PERSON_SCHEDULE_MIN_PERIOD_SECONDS` leaves the ones over it running.
Nothing changes them behind the operator's back; the doctor says which, and what to do.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from agent import InvalidSchedule, recur_cron
from gateway.config.settings import Settings, database_dsn
from storage import Database, ScheduleCaps, ScheduleCensus, StoredSchedule, schedule_census

# One line of the doctor's report: its status, and what it says.
Line: TypeAlias = tuple[Literal["ok", "warn"], str]


async def census(settings: Settings) -> ScheduleCensus:
    """People's schedules, counted against the settings' bounds."""
    s = settings.schedules
    least = s.person_min_period_seconds
    async with Database(await database_dsn(settings), min_size=1, max_size=1, signals=False) as db:
        return await schedule_census(
            db, ScheduleCaps(s.per_person, s.per_channel), lambda found: too_often(found, least)
        )


def too_often(schedule: StoredSchedule, least: int) -> bool:
    """Whether `schedule` runs more often than `least` seconds apart."""
    r = schedule.recurrence
    if r.kind == "every":
        return (r.every_seconds or 0) < least
    if r.kind == "cron" and r.cron is not None:
        try:
            recur_cron(r.cron, r.time_zone, minimum_seconds=least)
        except InvalidSchedule:
            return True
    return False


def findings(found: ScheduleCensus) -> list[Line]:
    """(status, detail) lines: one that counts, then a warning for each kind of slip."""
    lines: list[Line] = [
        (
            "ok",
            f"people's schedules: {found.active} active, {found.pending} waiting for their "
            f"owner's approval, {found.paused} paused",
        )
    ]
    if found.unapproved:
        lines.append(
            (
                "warn",
                f"{found.unapproved} of people's active schedules were never approved by their "
                "owner (made before approvals were asked for): `threadgate schedules list` "
                "shows them; pause or delete those their owners did not mean",
            )
        )
    if found.too_often:
        shown = ", ".join(found.too_often[:10])
        lines.append(
            (
                "warn",
                f"{len(found.too_often)} of people's active schedules run more often than "
                f"THREADGATE_PERSON_SCHEDULE_MIN_PERIOD_SECONDS allows (ids {shown}): pause "
                "or delete them, or raise their period",
            )
        )
    if found.owners_over or found.channels_over:
        lines.append(
            (
                "warn",
                f"{found.owners_over} person(s) and {found.channels_over} channel(s) have "
                "more schedules than THREADGATE_SCHEDULES_PER_PERSON / "
                "THREADGATE_SCHEDULES_PER_CHANNEL allow (their next ones are refused): "
                "delete some, or raise the caps",
            )
        )
    return lines
