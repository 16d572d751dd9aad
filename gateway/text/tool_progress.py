"""A running tool call's progress, as its task card's title: `fake__build · 3/5 (60%) ·
linking`.

An MCP server reports how far a long call has come (`notifications/progress`: progress so
far, maybe a total, maybe a message), and the person waiting should see it. It goes in the
card's title, not its `details`: Slack replaces a card's title with each `task_update`,
while what it does with `details` is not documented (appended, as measured by others), which
would pile every report under the card. When the call ends, the card's title is the tool's
name again, beside its outcome.

Everything here but the tool's name is the server's, so it is data: the numbers are shown
only when they are finite (a NaN or an infinite total is dropped, a percentage kept within 0
to 100), the message loses invisible characters and line breaks and is cut at
`MAX_MESSAGE_CHARS`. The title is then rendered like every card's title
(`gateway.delivery.streams.task_update`): nothing in it can ping, no link hides its host.
"""

from __future__ import annotations

import math

from agent import ToolProgress, sanitize_text

MAX_MESSAGE_CHARS = 120  # of the server's message; a card's title is one short line
_NUMBER_DIGITS = 6  # significant digits of a progress or total (1234567 shows as 1.23457e+06)
_SEPARATOR = " · "


def progress_title(name: str, progress: ToolProgress | None) -> str:
    """The card title of the call of `name`: its name, then how far it has come (if told)."""
    if progress is None:
        return name
    parts = [name, _amount(progress.progress, progress.total), _message(progress.message)]
    return _SEPARATOR.join(part for part in parts if part)


def _amount(progress: float, total: float | None) -> str:
    """`3/5 (60%)`, or `3` without a usable total; "" when the progress is not a number."""
    if not math.isfinite(progress):
        return ""
    done = f"{progress:.{_NUMBER_DIGITS}g}"
    if total is None or not math.isfinite(total) or total <= 0:
        return done
    # Clamped before flooring: a tiny total makes the ratio overflow to infinity.
    percent = math.floor(min(max(100 * progress / total, 0.0), 100.0))
    return f"{done}/{total:.{_NUMBER_DIGITS}g} ({percent}%)"


def _message(message: str | None) -> str:
    """The server's message as one short line of visible characters."""
    if not message:
        return ""
    line = " ".join(sanitize_text(message).split())
    if len(line) <= MAX_MESSAGE_CHARS:
        return line
    return line[: MAX_MESSAGE_CHARS - 1].rstrip() + "…"
