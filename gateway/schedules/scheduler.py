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

The check before a run, one Slack call: `conversations.info` for a channel or a thread
(archived, or not there: `channel_not_found`), `conversations.open` for a person's DM (the
first time: its channel is kept). A schedule whose channel is gone, whose person is gone,
or whose workspace no longer has the app is paused with the reason, counted (`paused`) and
told to the operators; any other failure of the check is not a reason not to run. A run
counts against the daily token budgets of its owner and channel like a person's message,
and a period whose budget is spent is not run (`limited`).

The run's turn is the schedule speaking (`render_schedule_turn`): nothing a person writes
can produce one. A channel's run posts at the top of the channel (its address has no
`thread_ts`), so each run opens a thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

from slack_sdk.web.async_client import AsyncWebClient

from gateway.delivery.alerts import OperatorAlerts
from gateway.slack.codes import Meaning, describe
from gateway.slack.errors import SlackError, SlackRefused
from gateway.slack.workspaces import NotInstalled, SlackClients
from gateway.text.provenance import ScheduleTurn, render_schedule_turn
from storage import (
    Admission,
    Database,
    Limits,
    LimitScope,
    ScheduledRun,
    StoredSchedule,
    before_downloads,
    due_schedules,
    fire_schedule,
    pause_unrunnable,
    seconds_until_due,
    set_dm_channel,
)

log = logging.getLogger(__name__)

# What Slack's refusal means when the run can never post there (gateway/slack/codes.py).
_UNRUNNABLE = frozenset({Meaning.TOKEN_REFUSED, Meaning.CONVERSATION_GONE, Meaning.PERSON_GONE})

# A schedule another scheduler holds is mid-fire: its transaction takes milliseconds.
_HELD = 0.25
Observe = Callable[[str], None]
Tell = Callable[[StoredSchedule, str], Awaitable[None]]


class Scheduler:
    """Fires the due periods of every schedule (module docstring)."""

    def __init__(
        self,
        db: Database,
        clients: SlackClients,
        *,
        late_seconds: float,
        observe: Observe,
        tell_operators: Tell,
        limits: Limits | None = None,
        idle_seconds: float = 300.0,
        retry_seconds: float = 5.0,
    ) -> None:
        self._db = db
        self._clients = clients
        self._late = late_seconds
        self._observe = observe
        self._tell = tell_operators
        # Only the token budgets: a run is no message a person sent in the hour.
        self._limits = (
            None
            if limits is None
            else dataclasses.replace(limits, user_messages_per_hour=0, thread_messages_per_hour=0)
        )
        self._idle = idle_seconds
        self._retry = retry_seconds
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
        it, or its check could not be made)."""
        channel = await self._check(schedule)
        if channel is None:  # paused now (settled), or to be checked again later
            return schedule.id not in self._not_before
        limited = await self._over_budget(schedule, channel)
        fired = await fire_schedule(
            self._db,
            schedule.id,
            lambda s, period: self._plan(s, period, channel),
            late_seconds=self._late,
            skip=limited is not None,
        )
        if fired is None:
            return False
        if limited is not None:
            log.warning(
                "schedule %s: period %s not run: %s is spent", schedule.id, fired.period, limited
            )
            self._observe("limited")
        elif fired.skipped:
            log.info("schedule %s: period %s was missed; skipped", schedule.id, fired.period)
            self._observe("skipped")
        elif fired.created:
            log.info(
                "schedule %s: period %s runs as task %s", schedule.id, fired.period, fired.task_id
            )
        return True

    async def _over_budget(self, schedule: StoredSchedule, channel: str) -> LimitScope | None:
        """The daily token budget a run would go past (its owner's, its channel's, every
        workspace's: what admission refuses a person's message for), if any."""
        if self._limits is None:
            return None
        session = _session(schedule, channel)
        asked = Admission(
            None, "", session, {}, "", user=schedule.owner, channel=f"{schedule.team}:{channel}"
        )
        verdict = await before_downloads(self._db, asked, self._limits)
        return verdict.limited

    async def _check(self, schedule: StoredSchedule) -> str | None:
        """The channel the run posts in, checked with Slack; None when it cannot run now
        (paused here, or to be looked at again after `retry_seconds`)."""
        try:
            client = await self._clients.for_team(schedule.team, schedule.enterprise)
            if schedule.target == "dm" and schedule.channel is None:
                return await self._open_dm(client, schedule)
            assert schedule.channel is not None
            if not schedule.channel.startswith(("D", "G")):  # DMs and group DMs stay
                info = await client.conversations_info(channel=schedule.channel)
                if (info.get("channel") or {}).get("is_archived"):
                    return await self._pause(schedule, "is_archived")
            return schedule.channel
        except NotInstalled:
            return await self._pause(schedule, "token_revoked")
        except SlackRefused as exc:
            if exc.meaning in _UNRUNNABLE:
                return await self._pause(schedule, exc.error)
            log.warning("schedule %s: checking its channel failed (%s)", schedule.id, exc.error)
        except SlackError as exc:
            log.warning("schedule %s: checking its channel failed (%s)", schedule.id, exc.reason)
        if schedule.channel is None:
            self._not_before[schedule.id] = time.monotonic() + self._retry
        return schedule.channel

    async def _open_dm(self, client: AsyncWebClient, schedule: StoredSchedule) -> str:
        """The person's DM channel (conversations.open), kept for the next runs."""
        response = await client.conversations_open(users=schedule.dm_user)
        channel = str((response.get("channel") or {})["id"])
        await set_dm_channel(self._db, schedule.id, channel)
        return channel

    async def _pause(self, schedule: StoredSchedule, code: str) -> str | None:
        """Pause `schedule` for Slack's `code`, saying why in an operator's words."""
        reason = describe(code)
        if await pause_unrunnable(self._db, schedule.id, reason):
            log.warning("schedule %s paused: %s", schedule.id, reason)
            self._observe("paused")
            with contextlib.suppress(Exception):  # telling is best effort; the pause holds
                await self._tell(schedule, reason)
        return None

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
