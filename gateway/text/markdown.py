"""Where the code is in model Markdown: fenced code blocks and inline code spans.

Making model text safe for Slack (`gateway.text.rendering`, `gateway.text.links`) must not corrupt
code: `<!DOCTYPE html>` or `List<@NonNull T>` in a code block is code, not a mention. So
those passes treat code and prose differently, and this module says which is which:

- a **fenced code block** runs from a line of three or more backticks or tildes to a line
  of at least as many of the same character, or to the end of the text (as CommonMark
  does when a fence is never closed); lines longer than `MAX_FENCE_LINE` never open or
  close one (the splitter's rule too, so both agree on every line);
- a **code span** is a run of backticks closed by the next run of exactly the same length
  within the same paragraph; a backtick after a backslash does not open one.

This is CommonMark's rule in the cases that matter, not a full parser. Where it errs, the
callers err safely: text taken for prose gets the stricter treatment, and the forms Slack
can actually resolve into a mention are neutralized in code too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MAX_FENCE_LINE", "Fence", "closes", "code_spans", "fence_at", "fenced_blocks"]

MAX_FENCE_LINE = 100
_FENCE_OPEN = re.compile(r"(?P<indent> *)(?P<fence>`{3,}(?=[^`]*$)|~{3,})(?P<info>.*)")
_BACKTICKS = re.compile(r"`+")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True, slots=True)
class Fence:
    """The opening line of a fenced code block, and how to close it."""

    line: str
    closing: str


def fence_at(line: str) -> Fence | None:
    """The fence this line opens, if it opens one."""
    match = _FENCE_OPEN.fullmatch(line)
    if match is None or len(line) > MAX_FENCE_LINE:
        return None
    return Fence(line=line, closing=match["indent"] + match["fence"])


def closes(line: str, fence: Fence) -> bool:
    """Whether `line` closes `fence`: the same character, at least as many, nothing else."""
    marks = fence.closing.lstrip(" ")
    stripped = line.strip(" ")
    if len(line) > MAX_FENCE_LINE or len(stripped) < len(marks):
        return False
    return stripped == marks[0] * len(stripped)


def fenced_blocks(text: str) -> list[tuple[int, int, bool]]:
    """`text` cut into consecutive `(start, end, fenced)` pieces covering all of it: each
    fenced code block (its fence lines included) and the prose between them."""
    pieces: list[tuple[int, int, bool]] = []
    start = offset = 0
    fence: Fence | None = None
    for line in text.split("\n"):
        end = min(offset + len(line) + 1, len(text))  # with its newline, if it has one
        if fence is None and (opened := fence_at(line)) is not None:
            if offset > start:
                pieces.append((start, offset, False))
            start, fence = offset, opened
        elif fence is not None and closes(line, fence):
            pieces.append((start, end, True))
            start, fence = end, None
        offset = end
    if start < len(text):
        pieces.append((start, len(text), fence is not None))
    return pieces


def code_spans(prose: str) -> list[tuple[int, int]]:
    """`(start, end)` of each inline code span in `prose` (text outside fenced blocks),
    backticks included, in order."""
    spans: list[tuple[int, int]] = []
    position = 0
    while (opener := _BACKTICKS.search(prose, position)) is not None:
        start, length = opener.start(), len(opener.group())
        if _escaped(prose, start):  # `\`` is a literal backtick; the rest of the run may open
            start, length = start + 1, length - 1
        end = _closing_run(prose, opener.end(), length) if length else None
        if end is None:
            position = opener.end()
            continue
        spans.append((start, end))
        position = end
    return spans


def _closing_run(prose: str, after: int, length: int) -> int | None:
    """The end of the first run of exactly `length` backticks after `after`, if it comes
    before the paragraph ends."""
    blank = _BLANK_LINE.search(prose, after)
    for run in _BACKTICKS.finditer(prose, after, blank.start() if blank else len(prose)):
        if len(run.group()) == length:
            return run.end()
    return None


def _escaped(text: str, index: int) -> bool:
    """Whether the character at `index` follows an odd number of backslashes."""
    before = index
    while before > 0 and text[before - 1] == "\\":
        before -= 1
    return (index - before) % 2 == 1
