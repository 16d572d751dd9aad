"""Model text (Markdown) to Slack messages that render well and can never ping anyone.

Replies go out as Slack's `markdown` block, which takes standard Markdown (tables and code
included) up to 12,000 characters per message, plus a plain-text `text` fallback for
notifications. Model text is untrusted (invariant 7): it must not be able to produce
`<!channel>`, `<!here>`, `<!everyone>`, `<!subteam^…>`, `<@U…>` or `<#C…>`.

How mentions are neutralized inside the markdown block: Slack documents no escaping for the
`markdown` block and does not say whether it honors mrkdwn's `<!here>`-style sequences, so we
assume it may. HTML-escaping the block (`&lt;`) is not an option: standard Markdown shows
entities literally inside code spans and code blocks, so every `a < b` or `List<int>` in code
would read `&lt;`. Instead a zero-width joiner (U+200D) goes between `<` and what follows:
the sequence can no longer form, and the text looks exactly the same. The entity spellings
of `<` (`&lt;`, `&LT;`, `&#60;`, `&#x3c;`) get the same joiner, in case Slack decodes
entities before parsing.

Where the joiner goes is decided by "no pings, and no corruption of code" (what is code is
`gateway.text.markdown`'s call):

- in prose, after every `<` before `!`, `@` or `#`: nothing a reader sees changes, and no
  `<!…>` form — known today or added by Slack tomorrow — can form;
- in code spans and fenced blocks, only before what Slack can resolve: a complete
  sequence with no space in its target (`<@U123>`, `<#C1|ops>`, `<!here>`,
  `<!subteam^S1>`) or a `<!here|channel|everyone|group|subteam|date…` command. So
  `<!DOCTYPE html>`, `<!-- comment -->`, `List<@NonNull T>` and PowerShell's `<# … #>`
  come out byte-identical;
- bare `@here`, `@channel`, `@everyone` (and the legacy `@group`) get the joiner after the
  `@` everywhere, code included: with `link_names` or `parse=full` Slack turns those words
  into pings, and they are not code in any language we know. The publisher also sends
  `parse="none"` and `link_names=False` explicitly, so the fallback never links names.

Links are checked before that (`gateway.text.links`): a link's visible text never hides the host
it opens.

A label Slack shows outside the message's markdown — a task card's title and details,
made from what the model wrote in a `delegate` call — gets the same two rules
(`render_label`), with the prose rule for mentions everywhere: a label has no code to keep
byte-identical, Slack does not say how it renders one, and mentions are never allowed in
one, whatever the configuration says for replies.
The fallback `text` is mrkdwn, so there the documented escaping (`&amp;`, `&lt;`, `&gt;`)
applies, after the prose rule's joiners everywhere, code included: escaping turns code's
harmless `<@0<` into `&lt;@0&lt;`, whose `&` could be read as the start of an escaped `>`,
and a notification is read, not copied, so the joiners cost nothing there.

Long replies are split into several messages on paragraph boundaries, never inside a fenced
code block when a boundary between blocks will do; a code block too long for one message is
closed at the end of a part and reopened, with its info string, at the start of the next.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gateway.text.links import reveal_link_hosts
from gateway.text.markdown import Fence, closes, code_spans, fence_at, fenced_blocks
from gateway.text.markup import escape_entities

__all__ = [
    "BLOCK_LIMIT",
    "EMPTY_REPLY",
    "FALLBACK_LIMIT",
    "MIN_LIMIT",
    "SlackMessage",
    "neutralize_everywhere",
    "neutralize_mentions",
    "render_label",
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
_LESS_THAN = r"(<|&(?:lt|LT);|&#0*60;|&#[xX]0*3[cC];)"
_PROSE_MENTION = re.compile(rf"{_LESS_THAN}(?=[!@#])")
_CODE_MENTION = re.compile(
    rf"{_LESS_THAN}(?=[!@#][^\s<>|&]+[|>&]|!(?:here|channel|everyone|group|subteam|date)\b)",
    re.IGNORECASE,
)
_BROADCAST = re.compile(
    r"(?<![\w@])(@|&#0*64;|&#[xX]0*40;)(?=(?:here|channel|everyone|group)\b)", re.IGNORECASE
)
_SLACK_SEQUENCE = re.compile(r"<[!@#][^<>]*>")
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


def neutralize_mentions(text: str) -> str:
    """Put a zero-width joiner where Slack could otherwise see a mention (module doc)."""
    pieces = []
    for start, end, fenced in fenced_blocks(text):
        if fenced:
            pieces.append(_neutralize_code(text, start, end))
            continue
        position = start
        for span_start, span_end in code_spans(text[start:end]):
            pieces.append(_neutralize_prose(text[position : start + span_start]))
            pieces.append(_neutralize_code(text, start + span_start, start + span_end))
            position = start + span_end
        pieces.append(_neutralize_prose(text[position:end]))
    return "".join(pieces)


def neutralize_everywhere(text: str) -> str:
    """The prose rule applied to all of `text`, code included: a joiner after every `<`
    before `!`, `@` or `#`. For text whose code spans are not known yet (a reply being
    streamed): it can change code by an invisible character, never let a mention form."""
    return _neutralize_prose(text)


def render_label(text: str) -> str:
    """A short line of model text for a task card: links show their host, nothing pings."""
    return neutralize_everywhere(reveal_link_hosts(text))


def _neutralize_prose(text: str) -> str:
    return _broadcasts(_PROSE_MENTION.sub(_join, text))


def _neutralize_code(text: str, start: int, end: int) -> str:
    """`text[start:end]`, code, with a joiner after each `<` there that starts a sequence
    Slack resolves. The sequence is judged on the whole text: it can run past the code's
    end (`` `<#` `` then `&gt;`), and the part after the code is not the code's to fix."""
    pieces, position = [], start
    for match in _CODE_MENTION.finditer(text, start):
        if match.start() >= end:
            break
        pieces += [text[position : match.end()], _JOINER]
        position = match.end()
    return _broadcasts("".join([*pieces, text[position:end]]))


def _broadcasts(text: str) -> str:
    return _BROADCAST.sub(_join, text)


def _join(match: re.Match[str]) -> str:
    return match.group(1) + _JOINER


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
    body = reveal_link_hosts(text)
    body = body if allow_mentions else neutralize_mentions(body)
    pieces = [small for piece in _pieces(body) for small in _fit(piece, limit)]
    parts = _pack(pieces, limit)
    # A line cut in two can start a part with `@here` that followed a word before the cut.
    return parts if allow_mentions else [_broadcasts(part) for part in parts]


def _fallback(part: str, allow_mentions: bool) -> str:
    """The notification text for one part: escaped mrkdwn, cut to FALLBACK_LIMIT."""
    if allow_mentions:
        text = _escape_keeping_sequences(part)
    else:
        text = escape_entities(_PROSE_MENTION.sub(_join, part))
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
        fence = fence_at(lines[index])
        if fence is not None and (end - index < 2 or not closes(lines[end - 1], fence)):
            piece += "\n" + fence.closing
        yield _Piece(piece, separator)
        index, separator = end, "\n"


def _piece_end(lines: list[str], start: int) -> int:
    """Index just past the piece starting at `start`: a code block, or a paragraph."""
    fence = fence_at(lines[start])
    if fence is not None:
        end = start + 1
        while end < len(lines) and not closes(lines[end], fence):
            end += 1
        return min(end + 1, len(lines))
    end = start + 1
    while end < len(lines) and lines[end].strip() and fence_at(lines[end]) is None:
        end += 1
    return end


def _fit(piece: _Piece, limit: int) -> Iterator[_Piece]:
    """The piece itself if it fits, else smaller pieces that each do."""
    if len(piece.text) <= limit:
        yield piece
        return
    lines = piece.text.split("\n")
    fence = fence_at(lines[0])
    chunks = _fit_code(lines, fence, limit) if fence else _fit_lines(lines, limit)
    for number, chunk in enumerate(chunks):
        yield _Piece(chunk, piece.separator if number == 0 else "\n")


def _fit_code(lines: list[str], fence: Fence, limit: int) -> list[str]:
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
        while end > limit // 2 and fence_at(line[end:]) is not None:
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
