"""A running tool's progress in its card's title: the tool's name first, the server's
numbers and words after it as one short line that can ping nobody, whatever the server
sends."""

from __future__ import annotations

import math

from hypothesis import example, given
from hypothesis import strategies as st

from agent import Step, ToolProgress
from gateway.delivery.streams import task_update
from gateway.text.tool_progress import MAX_MESSAGE_CHARS, progress_title
from tests.gateway.test_task_cards import PING, TEXTS

NUMBERS = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**30), 10**30).map(float)
MESSAGES = st.none() | TEXTS | st.text(max_size=400)
NAMES = st.from_regex(r"[a-zA-Z0-9_-]{1,64}", fullmatch=True)
INVISIBLE = ("\u200b", "\u2060", "\ufeff", "\u202e")


def card_title(name: str, progress: ToolProgress | None) -> str:
    return str(task_update(Step("C1", progress_title(name, progress), "in_progress"))["title"])


@given(NAMES, NUMBERS, st.none() | NUMBERS, MESSAGES)
@example("fake__build", 3.0, 5.0, "<!channel> linking\n\u200bstep <@U1>")
@example("fake__build", math.nan, math.inf, None)
def test_a_progress_title_is_one_short_line_that_pings_nobody(
    name: str, progress: float, total: float | None, message: str | None
) -> None:
    """The card's title starts with the tool's name, holds no line break, no invisible
    character and no mention, and stays short whatever the server reported."""
    title = card_title(name, ToolProgress(progress, total, message))
    assert title.startswith(name)
    assert "\n" not in title and not any(c in title for c in INVISIBLE)
    assert not PING.search(title), title
    assert len(progress_title(name, ToolProgress(progress, total, message))) <= (
        len(name) + 2 * 16 + MAX_MESSAGE_CHARS + 20
    )


@given(st.integers(0, 10**6), st.integers(1, 10**6))
def test_a_percentage_is_between_0_and_100(done: int, total: int) -> None:
    """`done/total (N%)` with N the floor of the share, kept within 0 and 100."""
    title = progress_title("t", ToolProgress(float(done), float(total)))
    percent = int(title.rsplit("(", 1)[1].rstrip("%)"))
    assert percent == min(100 * done // total, 100)


def test_progress_reads_as_a_person_would_say_it() -> None:
    """Numbers with a total and a message; a count without a total; the bare name without
    progress or once the numbers are not numbers."""
    assert progress_title("git__clone", ToolProgress(3, 5, "linking")) == (
        "git__clone · 3/5 (60%) · linking"
    )
    assert progress_title("git__clone", ToolProgress(12, None, None)) == "git__clone · 12"
    assert progress_title("git__clone", ToolProgress(0.25, 1.0)) == "git__clone · 0.25/1 (25%)"
    assert progress_title("git__clone", None) == "git__clone"
    assert progress_title("git__clone", ToolProgress(math.nan, 5, " ")) == "git__clone"


def test_a_long_message_is_cut_with_an_ellipsis() -> None:
    """A message past the limit ends in `…` at the limit."""
    title = progress_title("t", ToolProgress(1, None, "word " * 100))
    message = title.split(" · ", 2)[2]
    assert len(message) <= MAX_MESSAGE_CHARS and message.endswith("…")
