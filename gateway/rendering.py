"""Model text (Markdown) to Slack messages that render well and can never ping anyone.

Replies go out as Slack's `markdown` block, which takes standard Markdown (tables and code
included) up to 12,000 characters per message, plus a plain-text `text` fallback for
notifications. Model text is untrusted (invariant 7): it must not be able to produce
`<!channel>`, `<!here>`, `<!everyone>`, `<!subteam^…>`, `<@U…>` or `<#C…>`.

How mentions are neutralized inside the markdown block: Slack documents no escaping for the
`markdown` block and does not say whether it honors mrkdwn's `<!here>`-style sequences, so we
assume it may. HTML-escaping the block (`&lt;`) is not an option: standard Markdown shows
entities literally inside code spans and code blocks, so every `a < b` or `List<int>` in code
would read `&lt;`. Instead a zero-width joiner (U+200D) goes between `<` and a following `!`,
`@` or `#`: the sequence can no longer form, code and tables look exactly the same, and
Markdown autolinks like `<https://…>` still work. The entity spellings of `<` (`&lt;`, `&LT;`,
`&#60;`, `&#x3c;`) get the same joiner, in case Slack decodes entities before parsing.
The fallback `text` is mrkdwn, so there the documented escaping (`&amp;`, `&lt;`, `&gt;`)
applies.

Long replies are split into several messages on paragraph boundaries, never inside a fenced
code block when a boundary between blocks will do; a code block too long for one message is
closed at the end of a part and reopened, with its info string, at the start of the next.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gateway.markup import escape_entities

__all__ = [
    "BLOCK_LIMIT",
    "EMPTY_REPLY",
    "FALLBACK_LIMIT",
    "MIN_LIMIT",
    "SlackMessage",
    "neutralize_mentions",
    "render_reply",
    "split_markdown",
]

BLOCK_LIMIT = 12_000
"""Slack's limit on markdown block text, cumulative over one message (counted here in code
points; the split leaves no slack, so a caller worried about UTF-16 counting passes less)."""
FALLBACK_LIMIT = 3_000
"""Length of the plain-text fallback; it only has to serve notifications."""
MIN_LIMIT = 256
"""Smallest split limit accepted: room for a reopened code fence and some content."""
EMPTY_REPLY = "_(empty reply)_"

_JOINER = "\u200d"
_MENTION_START = re.compile(r"(<|&(?:lt|LT);|&#0*60;|&#[xX]0*3[cC];)(?=[!@#])")
_SLACK_SEQUENCE = re.compile(r"<[!@#][^<>]*>")
_MAX_FENCE_LINE = 100
_FENCE_OPEN = re.compile(r"(?P<indent> *)(?P<fence>`{3,}(?=[^`]*$)|~{3,})(?P<info>.*)")
_PARTIAL_ENTITY = re.compile(r"&[a-z]*$")


@dataclass(frozen=True, slots=True)
class SlackMessage:
    """One `chat.postMessage` worth of reply: the fallback text and one markdown block."""

    text: str
    blocks: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class _Piece:
    """A span of lines that is kept whole, with the separator that preceded it."""

    text: str
    separator: str = "\n"


@dataclass(frozen=True, slots=True)
class _Fence:
    """The opening line of a fenced code block, and how to close it."""

    line: str
    closing: str


def neutralize_mentions(text: str) -> str:
    """Put a zero-width joiner after every `<` (or its entity) that precedes `!`, `@`, `#`."""
    return _MENTION_START.sub(lambda match: match.group(1) + _JOINER, text)


def render_reply(
    text: str, *, limit: int = BLOCK_LIMIT, allow_mentions: bool = False
) -> list[SlackMessage]:
    """The Slack messages for one reply, in order; never an empty list."""
    parts = split_markdown(text, limit, allow_mentions=allow_mentions) or [EMPTY_REPLY]
    return [
        SlackMessage(
            text=_fallback(part, allow_mentions),
            blocks=({"type": "markdown", "text": part},),
        )
        for part in parts
    ]


def split_markdown(
    text: str, limit: int = BLOCK_LIMIT, *, allow_mentions: bool = False
) -> list[str]:
    """Block texts, each at most `limit` characters, mentions already neutralized."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} characters, got {limit}")
    body = text if allow_mentions else neutralize_mentions(text)
    pieces = [small for piece in _pieces(body) for small in _fit(piece, limit)]
    return _pack(pieces, limit)


def _fallback(part: str, allow_mentions: bool) -> str:
    """The notification text for one part: escaped mrkdwn, cut to FALLBACK_LIMIT."""
    text = _escape_keeping_sequences(part) if allow_mentions else escape_entities(part)
    if len(text) <= FALLBACK_LIMIT:
        return text
    cut = _PARTIAL_ENTITY.sub("", text[: FALLBACK_LIMIT - 1])
    if cut.rfind("<") > cut.rfind(">"):
        cut = cut[: cut.rfind("<")]
    return cut + "…"


def _escape_keeping_sequences(text: str) -> str:
    """Escape everything except Slack's `<!…>`, `<@…>`, `<#…>` sequences."""
    pieces: list[str] = []
    position = 0
    for match in _SLACK_SEQUENCE.finditer(text):
        pieces += [escape_entities(text[position : match.start()]), match.group()]
        position = match.end()
    return "".join([*pieces, escape_entities(text[position:])])


def _fence_at(line: str) -> _Fence | None:
    """The fence this line opens, if it opens one."""
    match = _FENCE_OPEN.fullmatch(line)
    if match is None or len(line) > _MAX_FENCE_LINE:
        return None
    return _Fence(line=line, closing=match["indent"] + match["fence"])


def _closes(line: str, fence: _Fence) -> bool:
    """Whether `line` closes `fence`: the same character, at least as many, nothing else."""
    marks = fence.closing.lstrip(" ")
    stripped = line.strip(" ")
    if len(line) > _MAX_FENCE_LINE or len(stripped) < len(marks):
        return False
    return stripped == marks[0] * len(stripped)


def _pieces(text: str) -> Iterator[_Piece]:
    """Paragraphs and whole fenced code blocks, each with the separator before it."""
    lines = text.split("\n")
    index, separator = 0, ""
    while index < len(lines):
        if not lines[index].strip():
            index, separator = index + 1, "\n\n" if separator else separator
            continue
        end = _piece_end(lines, index)
        piece = "\n".join(lines[index:end])
        fence = _fence_at(lines[index])
        if fence is not None and (end - index < 2 or not _closes(lines[end - 1], fence)):
            piece += "\n" + fence.closing
        yield _Piece(piece, separator)
        index, separator = end, "\n"


def _piece_end(lines: list[str], start: int) -> int:
    """Index just past the piece starting at `start`: a code block, or a paragraph."""
    fence = _fence_at(lines[start])
    if fence is not None:
        end = start + 1
        while end < len(lines) and not _closes(lines[end], fence):
            end += 1
        return min(end + 1, len(lines))
    end = start + 1
    while end < len(lines) and lines[end].strip() and _fence_at(lines[end]) is None:
        end += 1
    return end


def _fit(piece: _Piece, limit: int) -> Iterator[_Piece]:
    """The piece itself if it fits, else smaller pieces that each do."""
    if len(piece.text) <= limit:
        yield piece
        return
    lines = piece.text.split("\n")
    fence = _fence_at(lines[0])
    chunks = _fit_code(lines, fence, limit) if fence else _fit_lines(lines, limit)
    for number, chunk in enumerate(chunks):
        yield _Piece(chunk, piece.separator if number == 0 else "\n")


def _fit_code(lines: list[str], fence: _Fence, limit: int) -> list[str]:
    """A long code block as several, each closed and reopened with the same fence."""
    last = lines[-1]
    budget = limit - len(fence.line) - max(len(fence.closing), len(last)) - 2
    chunks = _fit_lines(lines[1:-1], budget)
    closings = [fence.closing] * (len(chunks) - 1) + [last]
    return [
        f"{fence.line}\n{chunk}\n{closing}" for chunk, closing in zip(chunks, closings, strict=True)
    ]


def _fit_lines(lines: list[str], limit: int) -> list[str]:
    """Lines packed greedily into chunks of at most `limit`; long lines are cut."""
    return _pack([_Piece(cut) for line in lines for cut in _cut(line, limit)], limit)


def _cut(line: str, limit: int) -> list[str]:
    """A line in pieces of at most `limit`, none of which would read as a code fence."""
    pieces: list[str] = []
    while len(line) > limit:
        end = limit
        while end > limit // 2 and _fence_at(line[end:]) is not None:
            end -= 1
        pieces.append(line[:end])
        line = line[end:]
    return [*pieces, line]


def _pack(pieces: list[_Piece], limit: int) -> list[str]:
    """Join consecutive pieces while the result stays within `limit`."""
    parts: list[str] = []
    for piece in pieces:
        if parts and len(parts[-1]) + len(piece.separator) + len(piece.text) <= limit:
            parts[-1] += piece.separator + piece.text
        else:
            parts.append(piece.text)
    return parts
