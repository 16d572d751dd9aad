"""`threadgate tasks`: operators see and steer every task, from any machine that reaches
the database.

`list` and `show` read (storage/inspection.py); `retry` and `cancel` change one task in one
locked transaction (storage/queue.py), safe while replicas run: a cancelled task's worker
finds its lease gone at its next heartbeat, stops, and posts nothing more. This module only
parses the operator's words and renders what storage returns — a table, a sectioned page,
or JSON (`--json`) for scripts. `threadgate sessions` steers one conversation the same way:
`reset` its prompt epoch (storage/memory.py), `delete` it with all it holds, or `clear` its
history and keep it (storage/sessions.py; both refused while a task of it is open).

Everything rendered for a terminal passes through `printable`: task texts are what people
wrote in Slack, and a message carrying terminal escape sequences must not repaint the
operator's screen, nor bidi controls reorder a line so it reads as something else. The
table and pages show each such character as an escape (`\\x1b`, `\\u202e`; the logs' rule,
`gateway.telemetry.logs.printable`); `--json` has them as JSON's `\\u` escapes, so a script
reads the text as it was. Tasks hold no secrets (Slack ids and conversation text), so
nothing is redacted; the database URL is never printed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import json
import re
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from agent import reply_id
from gateway.config.settings import Settings, database_dsn
from gateway.telemetry.logs import printable as shown
from gateway.telemetry.logs import printable_json
from storage import (
    TASK_STATES,
    Database,
    EpochRecord,
    Intervention,
    InterventionRecord,
    MessageRecord,
    PostRecord,
    RoundRecord,
    StorageError,
    StoredApproval,
    StoredToolCall,
    StoredVote,
    TaskDetail,
    TaskFilter,
    TaskSummary,
    approvals_of,
    cancel_task,
    clear_session,
    delete_session,
    inspect_task,
    list_tasks,
    reset_session,
    retry_task,
    votes_of,
)

ACTOR = "operator via threadgate tasks"

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+|\d+(?:\.\d+)?")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """Seconds in `90s`, `15m`, `2h`, `1d`, `1w`, `1h30m`, or a bare number of seconds."""
    cleaned = text.strip().lower()
    if not _DURATION.fullmatch(cleaned):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: write it like 90s, 15m, 2h, 1d or 1h30m."
        )
    parts = _PART.findall(cleaned)
    if not parts:
        return float(cleaned)
    return float(sum(float(n) * _UNITS[unit] for n, unit in parts))


def add_tasks_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tasks = sub.add_parser("tasks", help="list, show, retry or cancel tasks (any replica's)")
    actions = tasks.add_subparsers(required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="tasks, newest first, filtered")
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        type=_state,
        help=f"only tasks in this state ({', '.join(TASK_STATES)}); repeat for several",
    )
    listing.add_argument("--team", help="only tasks of this workspace id (T…)")
    listing.add_argument("--channel", help="only tasks of this channel id (C…, D…, G…)")
    listing.add_argument(
        "--older-than", type=parse_duration, metavar="AGE", help="created at least AGE ago (2h)"
    )
    listing.add_argument(
        "--newer-than", type=parse_duration, metavar="AGE", help="created at most AGE ago (1d)"
    )
    listing.add_argument("--limit", type=_positive, default=50, help="at most N tasks (50)")
    listing.add_argument("--json", action="store_true", help="JSON for scripts")
    listing.set_defaults(command=list_command)
    show = actions.add_parser("show", help="everything about one task")
    show.add_argument("id")
    show.add_argument("--json", action="store_true", help="JSON for scripts")
    show.set_defaults(command=show_command)
    for name, command, what in (
        ("retry", retry_command, "run a failed or cancelled task again"),
        ("cancel", cancel_command, "stop a queued, waiting or running task"),
    ):
        action = actions.add_parser(name, help=what)
        action.add_argument("id")
        action.add_argument("--reason", help="why, kept with the task for `tasks show`")
        action.set_defaults(command=command)


def add_sessions_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sessions = sub.add_parser("sessions", help="steer a conversation (a thread, or a DM's)")
    actions = sessions.add_subparsers(required=True, metavar="ACTION")
    reset = actions.add_parser(
        "reset", help="re-pin a session to the current system prompt at its next message"
    )
    reset.add_argument("id", help="the session id (`tasks show` prints a task's session)")
    reset.add_argument("--reason", help="why, kept with the session")
    reset.set_defaults(command=reset_command)
    delete = actions.add_parser(
        "delete", help="delete a session and all it holds (history, pins, epochs, tasks)"
    )
    delete.add_argument("id", help="the session id (`tasks show` prints a task's session)")
    delete.set_defaults(command=delete_session_command)
    clear = actions.add_parser("clear", help="delete a session's history, keep the session")
    clear.add_argument("id", help="the session id (`tasks show` prints a task's session)")
    clear.add_argument("--reason", help="why, kept with the session")
    clear.set_defaults(command=clear_session_command)


def _state(text: str) -> str:
    if text not in TASK_STATES:
        raise argparse.ArgumentTypeError(f"{text!r} is not a state: use one of {TASK_STATES}.")
    return text


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number of at least 1.")
    return int(text)


# -- commands -------------------------------------------------------------------------------


async def list_command(settings: Settings, args: argparse.Namespace) -> int:
    query = TaskFilter(
        args.state, args.team, args.channel, args.older_than, args.newer_than, args.limit
    )
    async with database(settings) as db:
        found = await list_tasks(db, query)
    print(as_json(found) if args.json else render_table(found, now=_now()))
    return 0


async def show_command(settings: Settings, args: argparse.Namespace) -> int:
    async with database(settings) as db:
        detail = await inspect_task(db, args.id)
        people = TaskPeople(
            tuple(await approvals_of(db, args.id)), tuple(await votes_of(db, reply_id(args.id)))
        )
    if args.json:
        print(as_json({**_plain(detail), "trace_id": detail.trace_id, **_plain(people)}))
    else:
        print(render_detail(detail, people))
    return 0


@dataclasses.dataclass(frozen=True, slots=True)
class TaskPeople:
    """What people decided about a task: its tool calls that waited for approval, and
    the votes on its reply."""

    approvals: tuple[StoredApproval, ...] = ()
    feedback: tuple[StoredVote, ...] = ()


async def retry_command(settings: Settings, args: argparse.Namespace) -> int:
    async with database(settings) as db:
        done = await retry_task(db, args.id, actor=actor(), reason=args.reason)
    print(printable(f"Task {done.task_id} is queued again (it was {done.from_state})."))
    return 0


async def cancel_command(settings: Settings, args: argparse.Namespace) -> int:
    async with database(settings) as db:
        done = await cancel_task(db, args.id, actor=actor(), reason=args.reason)
    print(printable(cancelled_sentence(done)))
    return 0


async def reset_command(settings: Settings, args: argparse.Namespace) -> int:
    """Unpin the session's prompt epoch: its next task pins the prompt of the deployment
    that runs it (audited like task interventions)."""
    async with database(settings) as db:
        done = await reset_session(db, args.id, actor=actor(), reason=args.reason)
    was = done.from_epoch[:12] if done.from_epoch else "none yet"
    print(
        printable(
            f"Session {done.session_id} was on prompt epoch {was}; its next message begins "
            "a new epoch (reset) with the current system prompt."
        )
    )
    return 0


async def delete_session_command(settings: Settings, args: argparse.Namespace) -> int:
    """Delete a session and everything it holds (storage/sessions.py)."""
    async with database(settings) as db:
        done = await delete_session(db, args.id)
    tasks = done.count("tasks")
    print(
        printable(
            f"Session {done.session_id} is deleted, with its {done.count('messages')} "
            f"messages and {tasks} {'task' if tasks == 1 else 'tasks'}; a new message in "
            "its thread starts a new session."
        )
    )
    return 0


async def clear_session_command(settings: Settings, args: argparse.Namespace) -> int:
    """Delete a session's history, keeping the session (storage/sessions.py)."""
    async with database(settings) as db:
        done = await clear_session(db, args.id, actor=actor(), reason=args.reason)
    print(
        printable(
            f"Session {done.session_id} is cleared: {done.count('messages')} messages and "
            f"{done.count('summaries')} summaries deleted; the session, its prompt epoch "
            "and its tasks stay."
        )
    )
    return 0


def cancelled_sentence(done: Intervention) -> str:
    if done.from_state == "running":
        return f"Task {done.task_id} is cancelled; its worker stops at its next heartbeat."
    return f"Task {done.task_id} is cancelled (it was {done.from_state})."


def actor() -> str:
    """Who acts: the operator's login where the system knows it."""
    try:
        return f"{ACTOR} ({getpass.getuser()})"
    except (KeyError, OSError):  # no login name (a container running as a bare uid)
        return ACTOR


@contextlib.asynccontextmanager
async def database(settings: Settings) -> AsyncIterator[Database]:
    """The database, checked to be migrated (for commands that read or change it)."""
    async with Database(await database_dsn(settings), min_size=1, max_size=2) as db:
        if not await db.is_ready():
            raise StorageError(
                "The database schema is not up to date: run `threadgate migrate` first."
            )
        yield db


def _now() -> datetime:
    return datetime.now().astimezone()


# -- rendering ------------------------------------------------------------------------------


def printable(text: str) -> str:
    """`text` with every character a terminal acts on but newline shown as its escape."""
    return shown(text, newlines=True)


def one_line(text: str | None, width: int) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis."""
    flat = printable(" ".join((text or "").split()))
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right_from: int = 0) -> str:
    """`header` above `rows`, each column as wide as its widest cell, two spaces apart;
    the columns from `right_from` on (when above 0) aligned right, as numbers are."""
    lines = [header, *rows]
    widths = [max(len(r[i]) for r in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.rjust(w) if 0 < right_from <= i else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in lines
    )


_COLUMNS = ("ID", "STATE", "CHANNEL", "AGE", "TRIES", "REQS", "LAST ERROR")


def render_table(tasks: Sequence[TaskSummary], *, now: datetime) -> str:
    """One line per task under a header; every cell on one line."""
    if not tasks:
        return "No tasks match."
    rows = [
        (
            one_line(t.id, 60),
            t.state,
            one_line(f"{t.team}/{t.channel}", 30),
            age(now - t.created_at),
            str(t.attempts),
            str(t.model_requests),
            one_line(t.last_error, 60),
        )
        for t in tasks
    ]
    return table(_COLUMNS, rows)


def age(delta: timedelta) -> str:
    """A short age: 42s, 7m, 3h, 2d."""
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def render_detail(d: TaskDetail, people: TaskPeople | None = None) -> str:
    """The sectioned page of `tasks show`."""
    people = people or TaskPeople()
    sections = [
        _overview(d),
        _section("Prompt epochs of the session", _epochs(d.epochs)),
        _section("Turn and answers", [_message(m, d) for m in d.messages]),
        _section("Rounds", [_round(r, d) for r in d.rounds]),
        _section("Tool calls", [_tool_call(c) for c in d.tool_calls]),
        _section("Approvals", [_approval(a) for a in people.approvals]),
        _section("Feedback", [_vote(v) for v in people.feedback]),
        _section("Posts to Slack (outbox)", [_post(p) for p in d.posts]),
        _section("Operator actions", [_intervention(i) for i in d.interventions]),
    ]
    return printable("\n\n".join(sections))


def _overview(d: TaskDetail) -> str:
    s = d.summary
    lease = f"owner {d.lease_owner} until {_when(d.lease_expires)}" if d.lease_owner else "none"
    fields = [
        ("state", _state_line(d)),
        ("where", f"team {s.team}, channel {s.channel}, thread {s.thread_ts}"),
        ("user", s.user or "(not recorded)"),
        ("session", d.session_id),
        ("attempts", str(s.attempts)),
        ("lease", lease),
        ("model requests", str(s.model_requests)),
        ("trace", d.trace_id or "not traced"),
        ("created", _when(s.created_at)),
        ("restarted", _when(d.restarted_at)),
        ("run after", _when(d.run_after)),
        ("finished", _when(s.finished_at)),
        ("last error", one_line(s.last_error, 200) or "none"),
    ]
    if d.covered_by is not None:  # a thread that collects its messages: answered there
        fields.insert(1, ("covered by", f"task {d.covered_by} (its reply answers this message)"))
    if d.covers:
        fields.insert(1, ("also answers", ", ".join(d.covers)))
    return "\n".join([f"Task {s.id}", *(f"  {k + ':':<16}{v}" for k, v in fields)])


def _state_line(d: TaskDetail) -> str:
    last = d.interventions[-1] if d.interventions else None
    if last is None or (last.action == "cancel") != (d.summary.state == "cancelled"):
        return d.summary.state
    verb = "cancelled" if last.action == "cancel" else "retried"
    why = f": {one_line(last.reason, 200)}" if last.reason else ""
    return f"{d.summary.state} ({verb} by {last.actor} at {_when(last.at)}{why})"


def _section(title: str, lines: Sequence[str]) -> str:
    return "\n".join([title, *(lines or ["  (none)"])])


def _epochs(epochs: Sequence[EpochRecord]) -> list[str]:
    """Each epoch of the session: its number, why and when it began, which prompt, and
    what it offered the model (the tools, in the order it saw them)."""
    lines = (
        [f"  (epochs 1 to {epochs[0].number - 1} not shown)"]
        if epochs and epochs[0].number > 1
        else []
    )
    for e in epochs:
        offers = ", ".join(e.tools) if e.offer_hash is not None else "(not recorded)"
        lines.append(
            f"  #{e.number} {e.reason} at {_when(e.at)}: prompt epoch {e.hash[:12]} "
            f"(version {e.version}), offers {offers}"
        )
    return lines


def _message(m: MessageRecord, d: TaskDetail) -> str:
    body = "\n".join(f"    {line}" for line in m.text.splitlines() or [""])
    return f"  {m.kind} {m.id} at {_when(m.created_at)}{_origin(m, d)}\n{body}"


def _origin(m: MessageRecord, d: TaskDetail) -> str:
    """An answer's prompt epoch (its number in the session, and the hash prefix: enough to
    tell epochs apart) and route."""
    if m.role != "assistant":
        return ""
    route = (
        f"{m.route_provider}:{m.route_model} ({m.route_slot})" if m.route_provider else "unknown"
    )
    return f", prompt epoch {_epoch_label(d, m.prompt_epoch, m.created_at)}, route {route}"


def _epoch_label(d: TaskDetail, epoch: str | None, at: datetime | None) -> str:
    """`#2 0123456789ab`: the session's epoch number (when it is shown) and hash prefix."""
    if epoch is None:
        return "unknown"
    found = d.epoch_of(epoch, at) if at is not None else None
    return f"#{found.number} {epoch[:12]}" if found else epoch[:12]


def _round(r: RoundRecord, d: TaskDetail) -> str:
    head = f"  round {r.number} at {_when(r.created_at)}: {one_line(r.acknowledgment, 200)}"
    subtasks = [
        f"    subtask {t.index} ({t.type}) {t.state}, {t.attempts} attempt(s), "
        f"deadline {_when(t.deadline)}, finished {_when(t.finished_at)}, "
        f"prompt epoch {_epoch_label(d, t.prompt_epoch, t.finished_at or t.deadline)}\n"
        f"      params: {one_line(json.dumps(t.params, ensure_ascii=False), 200)}\n"
        f"      result: {one_line(t.result, 400) or '(none yet)'}"
        for t in r.subtasks
    ]
    return "\n".join([head, *subtasks])


def _tool_call(c: StoredToolCall) -> str:
    return (
        f"  round {c.round} {c.name} ({c.call_id}) {c.state}, started {_when(c.started_at)}, "
        f"ended {_when(c.ended_at)}\n"
        f"      arguments: {one_line(c.arguments, 200)}\n"
        f"      output: {one_line(c.output, 400) or '(none yet)'}"
    )


def _approval(a: StoredApproval) -> str:
    if a.decision is None:
        decided = f"waiting, until {_when(a.deadline)}"
    elif a.decision == "timed_out":
        decided = f"timed out at {_when(a.decided_at)} (not run)"
    else:
        decided = f"{a.decision} by {a.decided_by} at {_when(a.decided_at)}"
    ran = {None: "not run", "running": "started, never finished", "ok": "ran", "error": "failed"}
    return (
        f"  {a.tool} ({a.call_id}) asked {_when(a.requested_at)}: {decided}; "
        f"{ran.get(a.run_state, a.run_state or '')}\n"
        f"      arguments: {one_line(a.arguments, 200)}"
    )


def _vote(v: StoredVote) -> str:
    return f"  {v.value} by {v.user_id} at {_when(v.updated_at)}"


def _post(p: PostRecord) -> str:
    ts = p.remote_ref or "no ts"
    return f"  {p.id}: {p.state}, {p.attempts} attempt(s), ts {ts}, updated {_when(p.updated_at)}"


def _intervention(i: InterventionRecord) -> str:
    why = f": {one_line(i.reason, 200)}" if i.reason else ""
    verb = "cancelled" if i.action == "cancel" else "retried"
    return f"  {_when(i.at)} {verb} by {i.actor} (was {i.from_state}){why}"


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone().isoformat(timespec="seconds")


def as_json(value: object) -> str:
    """Records as JSON: dataclasses as objects, times in ISO 8601; nothing a terminal acts
    on, raw (`printable_json`)."""
    return printable_json(json.dumps(_plain(value), indent=2, ensure_ascii=False))


def _plain(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value
