"""`threadgate schedules`: operators add, see and steer the work that runs on a schedule.

`add` stores a schedule (storage/schedules.py) — a channel (a new top-level post each
run), a thread, or a person's DM; a prompt; `--every`, `--cron` with `--tz`, or `--at` —
and every replica's scheduler hears of it at once (NOTIFY). `list` and `show` read them
with their last and next run and the last run's outcome, and for a person's schedule who
asked for it, from which message, and whether its owner approved it (pending, approved
by whom, denied, lapsed); `pause`, `resume` and `delete` take effect from the next period
on, whatever replica runs it. Operators see and steer every schedule, people's own
included; people manage theirs by asking the bot.

Like `threadgate tasks`, it renders a table, a page, or JSON (`--json`), every cell made
printable first: prompts are what people wrote.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Sequence
from datetime import datetime

from agent import InvalidSchedule, Recurrence, recur_cron, recur_every, recur_once
from gateway.config.settings import Settings
from gateway.operator.task_commands import age, as_json, database, one_line, printable, table
from storage import (
    NewSchedule,
    StoredSchedule,
    Target,
    create_schedule,
    delete_schedule,
    get_schedule,
    list_schedules,
    pause_schedule,
    resume_schedule,
)

ACTOR = "operator via threadgate schedules"


def add_schedules_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schedules = sub.add_parser(
        "schedules", help="add, list, show, pause, resume or delete schedules"
    )
    actions = schedules.add_subparsers(required=True, metavar="ACTION")
    add = actions.add_parser("add", help="a prompt run on a schedule, posted to Slack")
    add.add_argument("--team", required=True, help="the workspace id (T…) it posts in")
    where = add.add_mutually_exclusive_group(required=True)
    where.add_argument("--channel", help="a channel id (C…): a new post there each run")
    where.add_argument("--dm", metavar="USER", help="a person's user id (U…): in their DM")
    add.add_argument("--thread", metavar="TS", help="with --channel: post in this thread")
    add.add_argument("--prompt", required=True, help="what each run asks the agent to do")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--every", help="a period: 30m, 2h, 1d, 1h30m")
    when.add_argument("--cron", help='five cron fields: "0 9 * * MON-FRI"')
    when.add_argument("--at", help="once, at an ISO 8601 time: 2026-03-01T09:00")
    add.add_argument("--tz", default="UTC", help="the time zone of --cron and --at (UTC)")
    add.add_argument(
        "--missed",
        choices=("catch_up", "skip"),
        default="catch_up",
        help="periods missed while no gateway ran: one run for all (catch_up), or none",
    )
    add.add_argument("--json", action="store_true", help="JSON for scripts")
    add.set_defaults(command=add_command)
    listing = actions.add_parser("list", help="every schedule, with its last and next run")
    listing.add_argument("--owner", help="only this person's (team:user, e.g. T1:U123)")
    listing.add_argument("--json", action="store_true", help="JSON for scripts")
    listing.set_defaults(command=list_command)
    for name, command, what in (
        ("show", show_command, "everything about one schedule"),
        ("pause", pause_command, "no run from the next period on, until resumed"),
        ("resume", resume_command, "run again from the next period on"),
        ("delete", delete_command, "never run again (runs so far stay in `tasks`)"),
    ):
        action = actions.add_parser(name, help=what)
        action.add_argument("id")
        if name == "pause":
            action.add_argument("--reason", help="why, shown with the schedule")
        if name in ("show", "pause", "resume"):
            action.add_argument("--json", action="store_true", help="JSON for scripts")
        action.set_defaults(command=command)


async def add_command(settings: Settings, args: argparse.Namespace) -> int:
    try:
        new = _new_schedule(args, settings.schedules.min_period_seconds)
    except InvalidSchedule as exc:
        print(f"threadgate: {exc}", file=sys.stderr)
        return 2
    async with database(settings) as db:
        stored = await create_schedule(db, new)
    _print(stored, args.json)
    return 0


async def list_command(settings: Settings, args: argparse.Namespace) -> int:
    async with database(settings) as db:
        found = await list_schedules(db, owner=args.owner)
    print(as_json(found) if args.json else render_table(found, now=_now()))
    return 0


async def show_command(settings: Settings, args: argparse.Namespace) -> int:
    async with database(settings) as db:
        stored = await get_schedule(db, args.id)
    _print(stored, args.json)
    return 0


async def pause_command(settings: Settings, args: argparse.Namespace) -> int:
    async with database(settings) as db:
        stored = await pause_schedule(db, args.id, by=actor(), reason=args.reason)
    _print(stored, args.json, f"Schedule {stored.id} is {stored.state}.")
    return 0


async def resume_command(settings: Settings, args: argparse.Namespace) -> int:
    async with database(settings) as db:
        stored = await resume_schedule(db, args.id)
    _print(
        stored,
        args.json,
        f"Schedule {stored.id} is {stored.state}; next run {_when(stored.next_run_at)}.",
    )
    return 0


async def delete_command(settings: Settings, args: argparse.Namespace) -> int:
    async with database(settings) as db:
        deleted = await delete_schedule(db, args.id)
    if not deleted:
        print(printable(f"threadgate: no schedule has the id {args.id!r}."), file=sys.stderr)
        return 1
    print(printable(f"Schedule {args.id} is deleted; it will not run again."))
    return 0


def _new_schedule(args: argparse.Namespace, minimum_seconds: int) -> NewSchedule:
    if args.thread and not args.channel:
        raise InvalidSchedule("--thread needs --channel: the thread is in a channel.")
    target: Target = "dm" if args.dm else "thread" if args.thread else "channel"
    return NewSchedule(
        team=args.team,
        target=target,
        prompt=args.prompt,
        recurrence=_recurrence(args, minimum_seconds),
        created_by=actor(),
        channel=args.channel,
        thread_ts=args.thread,
        dm_user=args.dm,
        missed=args.missed,
    )


def _recurrence(args: argparse.Namespace, minimum_seconds: int) -> Recurrence:
    if args.every:
        return recur_every(args.every, minimum_seconds=minimum_seconds)
    if args.cron:
        return recur_cron(args.cron, args.tz, minimum_seconds=minimum_seconds)
    return recur_once(args.at, args.tz)


def actor() -> str:
    """Who acts: the operator's login where the system knows it."""
    try:
        return f"{ACTOR} ({getpass.getuser()})"
    except (KeyError, OSError):  # no login name (a container running as a bare uid)
        return ACTOR


def _print(schedule: StoredSchedule, json: bool, sentence: str | None = None) -> None:
    if json:
        print(as_json(schedule))
    else:
        print(printable("\n\n".join(p for p in (sentence, render_detail(schedule)) if p)))


# -- rendering ------------------------------------------------------------------------------

_COLUMNS = (
    "ID",
    "STATE",
    "WHEN",
    "WHERE",
    "NEXT RUN",
    "LAST RUN",
    "LAST OUTCOME",
    "OWNER (ASKED IN)",
    "PROMPT",
)


def render_table(schedules: Sequence[StoredSchedule], *, now: datetime) -> str:
    """One line per schedule under a header; every cell on one line."""
    if not schedules:
        return "No schedules."
    rows = [
        (
            s.id,
            s.state,
            one_line(s.recurrence.describe(), 40),
            one_line(f"{s.team}/{s.where}", 40),
            _when(s.next_run_at) if s.state == "active" else "-",
            f"{age(now - s.last_run_at)} ago" if s.last_run_at else "-",
            one_line(s.last_outcome or "-", 20),
            one_line(_asked(s), 50),
            one_line(s.prompt, 40),
        )
        for s in schedules
    ]
    return table(_COLUMNS, rows)


def render_detail(s: StoredSchedule) -> str:
    """The page of `schedules show`."""
    paused = (
        f"paused by {s.paused_by} at {_when(s.paused_at)}: {s.paused_reason or 'no reason given'}"
        if s.state == "paused"
        else s.state
    )
    outcome = s.last_outcome or "-"
    if s.last_outcome == "failed" and s.last_error:
        outcome = f"failed: {one_line(s.last_error, 200)}"
    fields = [
        ("state", paused),
        ("when", s.recurrence.describe()),
        ("missed runs", "one run for all of them" if s.missed == "catch_up" else "skipped"),
        ("where", f"team {s.team}, {s.where}"),
        ("owner", s.owner or "operators"),
        ("asked in", f"message {s.asked} (task {s.asked.task_id})" if s.asked else "-"),
        ("approval", _approval(s)),
        ("created", f"{_when(s.created_at)} by {s.created_by}"),
        ("next run", _when(s.next_run_at) if s.state == "active" else f"- ({s.state})"),
        ("last run", f"{_when(s.last_run_at)} (task {s.last_task_id})" if s.last_task_id else "-"),
        ("last outcome", outcome),
        ("skipped", str(s.skipped)),
    ]
    prompt = "\n".join(f"    {line}" for line in s.prompt.splitlines() or [""])
    lines = [f"Schedule {s.id}", *(f"  {k + ':':<14}{v}" for k, v in fields), "  prompt:", prompt]
    return "\n".join(lines)


def _asked(s: StoredSchedule) -> str:
    """Whose it is, and the message that asked for it (a person's)."""
    if s.owner is None:
        return "operators"
    return f"{s.owner} in {s.asked}" if s.asked else s.owner


def _approval(s: StoredSchedule) -> str:
    """What its owner decided: an operator's needs no approval."""
    if s.owner is None or s.approval_deadline is None:
        return "-"
    if s.state == "pending":
        lapsed = "lapsed at" if s.lapsed else "waiting for its owner until"
        return f"{lapsed} {_when(s.approval_deadline)}"
    if s.decided_at is None:
        return "-"
    if s.state == "denied":
        who = f"by {s.decided_by}" if s.decided_by else "(nobody decided in time)"
        return f"denied {who} at {_when(s.decided_at)}"
    return f"approved by {s.decided_by} at {_when(s.decided_at)}"


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone().isoformat(timespec="seconds")


def _now() -> datetime:
    return datetime.now().astimezone()
