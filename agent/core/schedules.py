"""Schedules as the agent sees them: what a person may ask for, and how a run may end.

A schedule is a standing request — a prompt, where its runs post, how often
(agent/core/recurrence.py) — that the gateway turns into a task once per period. Inside
the agent it shows in two places:

- the tools people use to manage their own (`schedule_create`, `schedule_list`,
  `schedule_delete`: agent/rounds/schedule_tools.py) go through `ScheduleBook`, a port
  that storage implements: the agent knows no SQL. The book takes the task whose round
  asked, and makes the person who wrote its turn the schedule's owner; a person may list
  and delete only their own.
- what a conversation asks for outlives the message that asked, and any text the model
  read can ask for it: so a schedule made by asking waits for its owner's approval
  (`ScheduleDesk`: on Slack, a message with Approve and Deny buttons that says who asked
  and from which message) and runs only once they approve. The book keeps a person's
  schedules, and a channel's, to a number (`ScheduleRefused` past it) and to a shortest
  period.
- a run (`Task.schedule_id`) may end without posting: `Silence`, the decision of the
  `no_reply` control tool, offered only in runs (agent/rounds/control.py), so that a
  digest of an empty channel says nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, TypeAlias

from agent.core.ports import AnswerOrigin, Task
from agent.core.recurrence import Recurrence

# Where a person's schedule posts: this conversation (the thread or DM it was asked in),
# this channel (a new top-level post each run), or the person's DM with the bot.
ScheduleWhere: TypeAlias = Literal["here", "channel", "dm"]
# What happens to periods missed while no gateway ran: one run for all of them, or none.
Missed: TypeAlias = Literal["catch_up", "skip"]


@dataclass(frozen=True, slots=True)
class ScheduleRequest:
    """A schedule as a person asked for it through the model."""

    prompt: str
    recurrence: Recurrence
    where: ScheduleWhere = "here"
    missed: Missed = "catch_up"


@dataclass(frozen=True, slots=True)
class ScheduleEntry:
    """One schedule as its owner sees it."""

    id: str
    prompt: str
    when: str  # `Recurrence.describe`
    where: str  # e.g. "channel C123", "thread C123/1700000000.000100", "DM"
    state: str  # pending approval (until when), active, paused (with why), done, denied
    next_run_at: datetime | None = None
    last_run_at: datetime | None = None
    last_outcome: str | None = None
    # Who asked for it and from which message, e.g. "U123 in message C456/1700000000.000100".
    origin: str = ""
    owner: str = ""  # the owner's user id, whom the desk asks


class ScheduleBook(Protocol):
    """The schedules of the person whose turn a task answers (module docstring)."""

    @property
    def minimum_seconds(self) -> int:
        """The shortest period a schedule may have here."""

    async def create(self, task: Task, request: ScheduleRequest) -> ScheduleEntry:
        """Store a schedule owned by the task's person, pending their approval (the one
        stored before, when this task asked for the same already); `ScheduleRefused` when
        they, or the channel, have as many as they may."""

    async def mine(self, task: Task) -> Sequence[ScheduleEntry]:
        """The task's person's schedules, oldest first."""

    async def delete(self, task: Task, schedule_id: str) -> bool:
        """Delete the task's person's schedule `schedule_id`; False when they have none by
        that id (someone else's counts as none)."""


class ScheduleDesk(Protocol):
    """Where a schedule's owner is asked to approve it (for Slack: a message in the
    conversation that asked, with Approve and Deny buttons)."""

    async def confirm(self, task: Task, entry: ScheduleEntry) -> None:
        """Ask the owner of the pending schedule `entry`, which `task` asked for, to
        approve it; once however often it is called."""


@dataclass(frozen=True, slots=True)
class Silence:
    """A schedule run's decision to post nothing (`no_reply`): why, for the operators."""

    reason: str = ""
    # Which prompt and route decided it (set by the responder, as on a reply).
    origin: AnswerOrigin | None = field(default=None, compare=False)
