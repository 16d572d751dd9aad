"""The App Home view: what the bot can do, and the person's own tasks, schedules and usage.

`home_view` is the Block Kit `home` view `views.publish` shows one person
(docs.slack.dev, "App Home", "views.publish": a view of type `home`, at most 100 blocks;
a `section` text at most 3,000 characters; a button's `value` at most 2,000). It is built
from what that person owns only — their open tasks (where and how old, never a message's
text), their schedules (their own prompts), their usage — so it never shows another
person's conversation.

Each task has a Stop button and each schedule a Delete button; a click comes back as a
`block_actions` payload from the view (its `container.type` is `view`) with the element's
`action_id` (`HOME_STOP`, `HOME_DELETE`) and the task's or schedule's id as its `value`.
Whose it is is decided by storage when the click acts (only the clicker's own task or
schedule is found), as approvals are decided by who asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from storage import OwnTask, StoredSchedule, UsageSums

HOME_STOP = "threadgate_home_stop"
HOME_DELETE = "threadgate_home_delete_schedule"
HOME_ACTION_IDS = (HOME_STOP, HOME_DELETE)

# Slack shows at most 100 blocks in a Home view; these keep it far below, whatever one owns.
MAX_TASKS = 15
MAX_SCHEDULES = 15
_SECTION_TEXT = 3000
_STATES = {"queued": "waiting its turn", "running": "working", "waiting": "waiting"}


@dataclass(frozen=True, slots=True)
class HomeState:
    """What one person's Home shows: their open tasks and schedules, and their usage."""

    tasks: Sequence[OwnTask]
    schedules: Sequence[StoredSchedule]
    usage: UsageSums

    @property
    def fingerprint(self) -> tuple[object, ...]:
        """What, changed, makes the view worth publishing again (ages are not in it: they
        change every second and say nothing new)."""
        tasks = tuple((t.id, t.state, t.stopping) for t in self.tasks)
        schedules = tuple((s.id, s.state, s.prompt, s.next_run_at) for s in self.schedules)
        u = self.usage
        return tasks, schedules, (u.today_tokens, u.today_usd, u.month_tokens, u.month_usd)


def home_view(state: HomeState, *, command: str) -> dict[str, Any]:
    """The `home` view for `state` (module docstring)."""
    blocks: list[dict[str, Any]] = [
        _header("What I can do"),
        _section(
            "Mention me in a channel, or write to me in our DM: I answer in the thread, and "
            "I can read the files you attach, use the tools this workspace allows, and run "
            "schedules you ask for (each waits for your approval). "
            f"`{command} help` lists what you can ask me without writing to me."
        ),
        {"type": "divider"},
        _header("Your tasks"),
        *_tasks(state.tasks),
        {"type": "divider"},
        _header("Your schedules"),
        *_schedules(state.schedules),
        {"type": "divider"},
        _header("Your usage"),
        _section(_usage(state.usage)),
    ]
    return {"type": "home", "blocks": blocks}


def _tasks(tasks: Sequence[OwnTask]) -> list[dict[str, Any]]:
    if not tasks:
        return [_section("Nothing of yours is working or waiting.")]
    shown = [_task(t) for t in tasks[:MAX_TASKS]]
    if len(tasks) > MAX_TASKS:
        shown.append(_context(f"and {len(tasks) - MAX_TASKS} more"))
    return shown


def task_state(task: OwnTask) -> str:
    """A task's state in words."""
    return "stopping" if task.stopping else _STATES.get(task.state, task.state)


def _task(task: OwnTask) -> dict[str, Any]:
    state = task_state(task)
    where = "in our DM" if task.channel.startswith("D") else f"in <#{task.channel}>"
    block = _section(f"*{state}* {where}, asked {age(task.age.total_seconds())} ago")
    if not task.stopping:
        block["accessory"] = _button(HOME_STOP, "Stop", task.id)
    return block


def _schedules(schedules: Sequence[StoredSchedule]) -> list[dict[str, Any]]:
    if not schedules:
        return [_section("You have no schedules.")]
    shown = [_schedule(s) for s in schedules[:MAX_SCHEDULES]]
    if len(schedules) > MAX_SCHEDULES:
        shown.append(_context(f"and {len(schedules) - MAX_SCHEDULES} more"))
    return shown


def _schedule(schedule: StoredSchedule) -> dict[str, Any]:
    prompt = schedule.prompt if len(schedule.prompt) <= 200 else schedule.prompt[:199] + "…"
    when = schedule.recurrence.describe()
    text = f"*#{schedule.id}* {escape(when)} ({schedule.state})\n{escape(prompt)}"
    block = _section(text)
    block["accessory"] = _button(HOME_DELETE, "Delete", schedule.id)
    return block


def _usage(usage: UsageSums) -> str:
    return (
        f"Today: {usage.today_tokens:,} tokens, ${usage.today_usd:.2f}. "
        f"This month: {usage.month_tokens:,} tokens, ${usage.month_usd:.2f} (UTC)."
    )


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": text}}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:_SECTION_TEXT]}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def _button(action_id: str, text: str, value: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": text},
        "style": "danger",
        "value": value,
    }


def age(seconds: float) -> str:
    """How long, in words a person reads at a glance."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def escape(text: str) -> str:
    """Slack's three control characters escaped, as its formatting reference asks."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
