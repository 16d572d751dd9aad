"""What the slash command answers, in words: pure functions of what storage read.

Everything here is shown to the person who typed the command, and only to them
(`response_type: ephemeral`). Their schedules' prompts are their own words, shown as
text: `&`, `<` and `>` are escaped, so nothing in them becomes a mention or a link.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from gateway.slack.commands import Unknown
from gateway.slack.home_view import age, escape, task_state
from storage import OwnStopped, OwnTask, StoredSchedule, UsageSums

FAILED = (
    "Sorry, I couldn't reach my database just now, so nothing was done. "
    "Please try again in a moment."
)
WORKING = "Working on it; the answer follows here in a moment."
AGAIN = "Done already: this command reached me twice, and I acted on it once."
LIMITED = (
    "Sorry, you've sent me more messages this hour than I can take from one person, "
    "so I won't act on this command until the hour is over."
)
NOT_ALLOWED = "Sorry, I'm not set up to take commands from you here."


def help_text(command: str) -> str:
    return "\n".join(
        [
            f"*{command}* — what I'm doing for you, without writing to me:",
            f"• `{command} status` — your tasks here that are working or waiting, and their age",
            f"• `{command} stop` — stop your task working here (and your queued ones)",
            f"• `{command} new` — start a fresh conversation in this DM",
            f"• `{command} usage` — what your questions cost today and this month",
            f"• `{command} schedules` — your schedules, with their ids",
            f"• `{command} schedules delete ID` — delete one of your schedules",
            "Your App Home tab shows the same, with buttons.",
        ]
    )


def unknown_text(command: str, parsed: Unknown) -> str:
    return f"I don't know `{escape(parsed.text)}`.\n{help_text(command)}"


def status_text(tasks: Sequence[OwnTask], *, direct: bool) -> str:
    where = "in this DM" if direct else "in this channel"
    if not tasks:
        return f"Nothing of yours is working or waiting {where}."
    lines = [f"Your tasks {where}:"]
    lines += [f"• {task_line(t)}" for t in tasks]
    return "\n".join(lines)


def task_line(task: OwnTask) -> str:
    """One task as its owner sees it: its state and how long ago it was asked."""
    return f"{task_state(task)}, asked {age(task.age.total_seconds())} ago"


def stop_text(stopped: OwnStopped, *, direct: bool) -> str:
    where = "in this DM" if direct else "in this channel"
    if not stopped:
        return f"Nothing of yours is working or waiting {where}, so there was nothing to stop."
    parts = []
    if stopped.stopped:
        parts.append(f"stopped {_count(len(stopped.stopped), 'working task')}")
    if stopped.cancelled:
        parts.append(f"cancelled {_count(len(stopped.cancelled), 'queued message')}")
    done = " and ".join(parts)
    return f"{done[0].upper()}{done[1:]} of yours {where}."


def usage_text(mine: UsageSums, channel: UsageSums | None) -> str:
    lines = [
        f"Your usage today: {usage_line(mine.today_tokens, mine.today_usd)}; "
        f"this month: {usage_line(mine.month_tokens, mine.month_usd)} (UTC)."
    ]
    if channel is not None:
        lines.append(
            f"This channel today: {usage_line(channel.today_tokens, channel.today_usd)}; "
            f"this month: {usage_line(channel.month_tokens, channel.month_usd)}."
        )
    return "\n".join(lines)


def usage_line(tokens: int, usd: Decimal) -> str:
    return f"{tokens:,} tokens, ${usd:.2f}"


def schedules_text(schedules: Sequence[StoredSchedule], command: str) -> str:
    if not schedules:
        return "You have no schedules."
    lines = ["Your schedules:"]
    lines += [f"• {schedule_line(s)}" for s in schedules]
    lines.append(f"Delete one with `{command} schedules delete ID`.")
    return "\n".join(lines)


def schedule_line(schedule: StoredSchedule) -> str:
    """A schedule as its owner sees it: id, when, state, and the start of its prompt."""
    prompt = schedule.prompt if len(schedule.prompt) <= 80 else schedule.prompt[:79] + "…"
    when = schedule.recurrence.describe()
    return f"#{schedule.id} — {escape(when)} — {schedule.state} — {escape(prompt)}"


def deleted_text(schedule_id: str, deleted: bool) -> str:
    if deleted:
        return f"Deleted your schedule #{schedule_id}."
    return f"You have no schedule #{schedule_id}; nothing was deleted."


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
