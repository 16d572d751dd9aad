"""The work tools through which people manage their own schedules by asking the bot.

"Every weekday at 9, summarize this channel" becomes a `schedule_create` call; the
schedule belongs to the person whose turn the round answers (the `ScheduleBook` port,
agent/core/schedules.py, decides that from the task, not from anything the model says),
and `schedule_list` and `schedule_delete` see only that person's. They are ordinary work
tools with ordinary names, so a channel's policy can withhold them like any other.

A schedule made here does not run until its owner approves it: `schedule_create` stores
it pending and asks them (`ScheduleDesk`), and tells the model so. The model may have been
talked into the call by anything it read; the owner, shown who asked and from which
message, is the one who says yes. A schedule past the person's or the channel's cap is a
failed call whose message says why (`ScheduleRefused`), for the model to relay.

They are not offered to a sub-agent, nor in a schedule's own runs: a run speaks for the
schedule, not for a person, and a schedule that made schedules would multiply.

`SCHEDULED_TURNS` is what the system prompt says about the turns a schedule speaks in
(gateway/text/provenance.py renders them).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.core.errors import InvalidSchedule
from agent.core.recurrence import Recurrence, recur_cron, recur_every, recur_once
from agent.core.schedules import ScheduleBook, ScheduleDesk, ScheduleEntry, ScheduleRequest
from agent.rounds.tools import ToolContext, WorkTool

SCHEDULED_TURNS = """\
A turn that has `schedule` where a person's has `from` and `id` is not a person speaking \
now: it is a standing request running on a schedule, e.g. \
<turn schedule="7" by="U123" channel="C456" at="2026-01-01T09:00:00+00:00">text</turn>. \
`schedule` is its id, `by` who set it up (the text is what they asked for then), `at` the \
period this run is for. Do what it asks and answer with final_reply; nobody is waiting in \
the conversation to answer your questions. When there is nothing worth posting (a digest \
of a quiet channel), call no_reply instead and nothing is posted. A run that posts in a \
channel opens a new thread there; read_thread then reads the channel's latest messages."""

_PROMPT_CHARS = 4000


class ScheduleCreateInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(
        min_length=1,
        max_length=_PROMPT_CHARS,
        description="What to do at each run, written as the request itself.",
    )
    every: str | None = Field(
        default=None, description="A fixed period, like 30m, 2h or 1d (give one of every/cron/at)."
    )
    cron: str | None = Field(
        default=None,
        description='Five cron fields, minute hour day month weekday: "0 9 * * MON-FRI".',
    )
    at: str | None = Field(
        default=None, description="Once, at an ISO 8601 time like 2026-03-01T09:00."
    )
    time_zone: str = Field(
        default="UTC", description="IANA time zone for cron and at, like Europe/Berlin."
    )
    where: Literal["here", "channel", "dm"] = Field(
        default="here",
        description=(
            "here: this conversation; channel: a new post in this channel each run; "
            "dm: the person's direct messages with you."
        ),
    )
    missed: Literal["catch_up", "skip"] = Field(
        default="catch_up",
        description="Runs missed while the bot was down: catch_up runs once when back; skip.",
    )


class ScheduleListInput(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScheduleDeleteInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=40, description="The schedule's id.")


class _ScheduleTool:
    """What the three tools share: the book, and where they are offered."""

    def __init__(self, book: ScheduleBook, desk: ScheduleDesk) -> None:
        self._book = book
        self._desk = desk

    def available(self, context: ToolContext) -> bool:
        return context.subtask_type is None and context.task.schedule_id is None


class ScheduleCreate(_ScheduleTool, WorkTool[ScheduleCreateInput]):
    """`schedule_create`: a standing request of the asking person's."""

    name = "schedule_create"
    description = (
        "Set up work that runs on a schedule for the person asking: a prompt run every "
        "period (every), on a cron expression (cron) or once (at), its result posted here, "
        "in this channel or in their DMs. It belongs to that person, and runs only once "
        "they approve it with the button the gateway posts."
    )
    input_model = ScheduleCreateInput

    async def execute(self, context: ToolContext, input: ScheduleCreateInput) -> str:
        recurrence = self._recurrence(input)
        request = ScheduleRequest(input.prompt.strip(), recurrence, input.where, input.missed)
        entry = await self._book.create(context.task, request)
        await self._desk.confirm(context.task, entry)
        return (
            f"Created, waiting for its owner's approval: nothing runs until they click "
            f"Approve on the message just posted. {describe(entry)}"
        )

    def _recurrence(self, input: ScheduleCreateInput) -> Recurrence:
        given = [n for n in ("every", "cron", "at") if getattr(input, n)]
        if len(given) != 1:
            raise InvalidSchedule(
                f"Give exactly one of `every`, `cron` or `at` (got {', '.join(given) or 'none'})."
            )
        least = self._book.minimum_seconds
        if input.every:
            return recur_every(input.every, minimum_seconds=least)
        if input.cron:
            return recur_cron(input.cron, input.time_zone, minimum_seconds=least)
        assert input.at is not None
        return recur_once(input.at, input.time_zone)


class ScheduleList(_ScheduleTool, WorkTool[ScheduleListInput]):
    """`schedule_list`: the asking person's schedules."""

    name = "schedule_list"
    description = "List the schedules of the person asking: id, when, where, state, last run."
    input_model = ScheduleListInput

    async def execute(self, context: ToolContext, input: ScheduleListInput) -> str:
        entries = await self._book.mine(context.task)
        if not entries:
            return "This person has no schedules."
        return "\n".join(describe(e) for e in entries)


class ScheduleDelete(_ScheduleTool, WorkTool[ScheduleDeleteInput]):
    """`schedule_delete`: one of the asking person's schedules, by id."""

    name = "schedule_delete"
    description = "Delete one of the asking person's schedules by its id (see schedule_list)."
    input_model = ScheduleDeleteInput

    async def execute(self, context: ToolContext, input: ScheduleDeleteInput) -> str:
        if await self._book.delete(context.task, input.id.strip()):
            return f"Deleted schedule {input.id.strip()}; it will not run again."
        return (
            f"This person has no schedule {input.id.strip()!r}: schedule_list shows theirs "
            "(others' schedules cannot be deleted here)."
        )


def schedule_tools(book: ScheduleBook, desk: ScheduleDesk) -> list[WorkTool[Any]]:
    """The three tools, on `book` (owners asked at `desk`), for a deployment's registry."""
    return [ScheduleCreate(book, desk), ScheduleList(book, desk), ScheduleDelete(book, desk)]


def describe(entry: ScheduleEntry) -> str:
    """One schedule on one line, as the model reads it."""
    next_run = entry.next_run_at.isoformat(timespec="seconds") if entry.next_run_at else "none"
    last = (
        f"; last run {entry.last_run_at.isoformat(timespec='seconds')}: {entry.last_outcome}"
        if entry.last_run_at
        else ""
    )
    asked = f" Asked by {entry.origin}." if entry.origin else ""
    return (
        f"Schedule {entry.id}: {entry.when}, posting to {entry.where}, {entry.state}; "
        f"next run {next_run}{last}.{asked} Prompt: {entry.prompt}"
    )
