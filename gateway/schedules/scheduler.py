"""The scheduler: each period of each schedule becomes one task, on any number of replicas.

It runs in every process with the worker role, as one background loop beside the task
workers. A pass looks at the schedules whose period has started and, for each, first
checks with Slack that its run can post (below), then fires it (storage/schedules.py
`fire_schedule`): one transaction that inserts the period's task and moves the schedule
on, so whichever replica gets there first runs the period and every other finds nothing
to do. The task is then an ordinary task, claimed by any worker.

Between passes the loop sleeps until the next period starts, or until a schedule changes
(storage NOTIFYs `threadgate_schedules`: the CLI, a person's tool call, another replica's
fire), at most `idle_seconds` — never polling hot: a schedule another replica is firing is
looked at again a moment later (its transaction takes milliseconds), one whose check
failed only after `retry_seconds`.

Before a run it is checked with Slack (gateway/schedules/preflight.py): its channel still
there, not archived, and not shared with another organization where its policy refuses
that; a person's schedule's owner still in the workspace and, for a channel's, in the
channel. A schedule that cannot run is paused with the reason, counted (`paused`) and
told to the operators, and to its owner when it is theirs; a check that could not be made
runs nothing now (`unverified`), and the schedule is looked at again after
`retry_seconds`.

A run is held to the limits of its channel (its own, from `THREADGATE_CHANNEL_CONFIG`,
else the deployment's) like a person's message: its owner's hourly messages and daily
tokens, its channel's tokens and spend, its workspace's spend, every workspace's tokens —
in the transaction that fires it (storage/schedules.py, migration 028), which also keeps
runs that fire together from all passing before any has spent: a run waits while runs in
flight may spend what its budgets have left, and is looked at again a moment later. A
period a limit refuses is not run (`limited`).

The run's turn is the schedule speaking (`render_schedule_turn`): nothing a person writes
can produce one. A channel's run posts at the top of the channel (its address has no
`thread_ts`), so each run opens a thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from gateway.delivery.alerts import OperatorAlerts
from gateway.schedules.preflight import Preflight, Runnable, Unrunnable
from gateway.text.provenance import ScheduleTurn, render_schedule_turn
from storage import (
    Database,
    Fired,
    Limits,
    ScheduledRun,
    StoredSchedule,
    due_schedules,
    fire_schedule,
    pause_unrunnable,
    seconds_until_due,
)

log = logging.getLogger(__name__)

# A schedule another scheduler holds is mid-fire: its transaction takes milliseconds.
_HELD = 0.25
# A run waiting for runs in flight against its budgets: they end in seconds or minutes.
_IN_FLIGHT = 1.0
Observe = Callable[[str], None]
Tell = Callable[[StoredSchedule, str], Awaitable[None]]
# The limits a run in `channel` is held to: the channel's own, else the deployment's.
LimitsOf = Callable[[str], Limits]


@dataclass(frozen=True, slots=True)
class Timing:
    """How late a period may run when missed ones are skipped, the longest sleep between
    passes, and how soon a schedule whose check could not be made is looked at again."""

    late_seconds: float
    idle_seconds: float = 300.0
    retry_seconds: float = 5.0


class Scheduler:
    """Fires the due periods of every schedule (module docstring)."""

    def __init__(
        self,
        db: Database,
        preflight: Preflight,
        *,
        timing: Timing,
        limits_of: LimitsOf | None,
        observe: Observe,
        tell_operators: Tell,
    ) -> None:
        """`limits_of`: None holds runs to no limits."""
        self._db = db
        self._preflight = preflight
        self._late = timing.late_seconds
        self._idle = timing.idle_seconds
        self._retry = timing.retry_seconds
        self._limits_of = limits_of
        self._observe = observe
        self._tell = tell_operators
        self._not_before: dict[str, float] = {}  # a schedule to leave alone until then

    async def run(self) -> None:
        """Pass after pass, until cancelled; a failed pass is logged and tried again."""
        while True:
            self._db.schedules_changed.clear()
            try:
                left = await self.run_due()
                wait = await seconds_until_due(self._db, excluding=list(left))
                if left:  # due, and left to another replica or to a later check
                    wait = min(wait if wait is not None else self._idle, *left.values())
            except Exception:
                log.exception("the scheduler's pass failed; trying again")
                wait = self._retry
            await self._sleep(self._idle if wait is None else min(wait, self._idle))

    async def run_due(self) -> dict[str, float]:
        """Fire every due schedule this process may; those left due, with the seconds
        until this process looks at each again."""
        left: dict[str, float] = {}
        for schedule in await due_schedules(self._db):
            wait = self._not_before.get(schedule.id, 0.0) - time.monotonic()
            if wait > 0:
                left[schedule.id] = wait
                continue
            self._not_before.pop(schedule.id, None)
            if not await self._fire(schedule):
                held = self._not_before.get(schedule.id)
                left[schedule.id] = _HELD if held is None else held - time.monotonic()
        return left

    async def _fire(self, schedule: StoredSchedule) -> bool:
        """Check and fire one schedule; False when it stays due (another scheduler holds
        it, its check could not be made, or runs in flight may spend its budgets)."""
        verdict = await self._preflight.check(schedule)
        if isinstance(verdict, Unrunnable):
            await self._pause(schedule, verdict)
            return True
        if not isinstance(verdict, Runnable):
            log.warning("schedule %s: its check could not be made (%s)", schedule.id, verdict.why)
            self._observe("unverified")
            self._not_before[schedule.id] = time.monotonic() + self._retry
            return False
        channel = verdict.channel
        fired = await fire_schedule(
            self._db,
            schedule.id,
            lambda s, period: self._plan(s, period, channel),
            late_seconds=self._late,
            limits=None if self._limits_of is None else self._limits_of(channel),
        )
        if fired is None:
            return False
        if fired.waits:
            log.info("schedule %s: waits for runs in flight against its budgets", schedule.id)
            self._not_before[schedule.id] = time.monotonic() + _IN_FLIGHT
            return False
        self._settled(fired)
        return True

    def _settled(self, fired: Fired) -> None:
        """Log and count what firing did."""
        sid, period = fired.schedule.id, fired.period
        if fired.limited is not None:
            log.warning("schedule %s: period %s not run: over %s", sid, period, fired.limited)
            self._observe("limited")
        elif fired.skipped:
            log.info("schedule %s: period %s was missed; skipped", sid, period)
            self._observe("skipped")
        elif fired.created:
            log.info("schedule %s: period %s runs as task %s", sid, period, fired.task_id)

    async def _pause(self, schedule: StoredSchedule, why: Unrunnable) -> None:
        """Pause `schedule` for `why`: the operators hear of it, and its owner when they
        can still read it — once, by whichever scheduler paused it."""
        if not await pause_unrunnable(self._db, schedule.id, why.reason):
            return
        log.warning("schedule %s paused: %s", schedule.id, why.reason)
        self._observe("paused")
        with contextlib.suppress(Exception):  # telling is best effort; the pause holds
            await self._tell(schedule, why.reason)
        if why.tell_owner and schedule.owner_user is not None:
            try:
                await self._preflight.tell_owner(schedule, why.reason)
            except Exception as exc:  # best effort too: the operators heard of it
                log.warning("schedule %s: telling its owner failed (%s)", schedule.id, exc)

    def _plan(self, schedule: StoredSchedule, period: datetime, channel: str) -> ScheduledRun:
        """The period's task: where it posts, its conversation, the schedule's turn."""
        thread_ts = schedule.thread_ts if schedule.target == "thread" else ""
        session = _session(schedule, channel)
        person = schedule.owner.split(":", 1)[-1] if schedule.owner else None
        turn = ScheduleTurn(
            schedule.id, person or schedule.created_by, channel, period, schedule.prompt
        )
        # `user`: to whom a stream in the thread is addressed (gateway/delivery/streams.py).
        user = schedule.dm_user or person
        address = {
            "team": schedule.team,
            "channel": channel,
            "thread_ts": thread_ts or "",
            **({"user": user} if user else {}),
            **({"enterprise": schedule.enterprise} if schedule.enterprise else {}),
        }
        return ScheduledRun(
            session, address, render_schedule_turn(turn), f"{schedule.team}:{channel}"
        )

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(seconds, 0.0)):
                await self._db.schedules_changed.wait()


async def tell_paused(alerts: OperatorAlerts, schedule: StoredSchedule, reason: str) -> None:
    """The operators hear that a schedule stopped running, and how to start it again."""
    await alerts.notice(
        f"schedule-paused:{schedule.id}",
        f":pause_button: *Schedule {schedule.id} is paused*: {reason}. It posted to "
        f"{schedule.where} in workspace {schedule.team}. Fix that, then "
        f"`threadgate schedules resume {schedule.id}` (or delete it).",
    )


def _session(schedule: StoredSchedule, channel: str) -> str:
    """The conversation a run belongs to: the thread's, the DM's running one, or, at the
    top of a channel, the schedule's own (each run sees the runs before it)."""
    if schedule.target == "thread":
        return f"{schedule.team}:{channel}:{schedule.thread_ts}"
    if schedule.target == "dm":
        return f"{schedule.team}:{channel}"
    return f"{schedule.team}:{channel}:schedule:{schedule.id}"
