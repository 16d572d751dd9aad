"""Where the links are in model Markdown, in every form a reader may see one open.

`gateway.text.links` decides what a link must show; this module finds them. What Slack's
`markdown` block accepts is not documented to the letter, so forms are found leniently —
a form taken for a link that Slack would show as plain text only gets its host shown after
it, which hides nothing — and otherwise the way CommonMark reads them:

- inline links `[text](url "title")`, with spaces and one line break around the URL and
  its title inside the parentheses, as CommonMark allows (`[text](\\nurl\\n)`), and also
  with spaces or one line break between `]` and `(` (`[text] (url)`, `[text]\\n(url)`),
  which older Markdown renderers accept;
- reference links `[text][ref]`, `[text][]` and `[ref]`, with a definition `[ref]: url`
  anywhere in the text (labels compared case-insensitively with their spaces collapsed,
  the first definition winning; a definition is taken wherever it stands, not only at
  the start of a line, but only with a destination CommonMark reads — parentheses
  balanced, nothing after it on its line but a title — else its `[label]` may be a link);
- images `![alt](url)` and `![alt][ref]`: Slack shows an image as a link whose text is
  its alt text;
- Slack's `<url|text>`, and autolinks `<url>`;
- bare URLs (`https://…`, `www.…`), which Slack links by itself.

A Markdown link holds no other Markdown link (the inner one is the link, as in
CommonMark); an image, a Slack link or an autolink may sit in a link's text
(`[![alt](img)](url)`). Code is opaque: nothing in a code span or a fenced block is a link.

A streamed reply is shown before its end is known, and a definition at the end would turn
text shown earlier into links whose host nobody checked. `disarm_definitions` escapes
every definition's `[` for such text: it then defines nothing and reads as written.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.text.markdown import code_spans, fenced_blocks

__all__ = [
    "URL_CHARACTERS",
    "URL_STARTS",
    "Link",
    "definition_starts",
    "disarm_definitions",
    "disarm_doubtful_definitions",
    "find_links",
]

# Between a link's text and its destination or reference: nothing in CommonMark; spaces
# or one line break in older renderers, which we follow to be safe.
_GAP = r"[ \t]*(?:\n[ \t]*)?"
# Inside the parentheses, around the destination and its title: spaces or tabs with at most
# one line break (CommonMark), so `[text](\nhttps://…\n)` is a link like any other.
_SPACE = r"[ \t]*(?:\n[ \t]*)?"
# A title in its quotes or parentheses: escapes, and line breaks but not a blank line.
_TITLE = "|".join(
    rf"{opening}(?:[^{inside}\\\n]|\\.|\\?\n(?![ \t]*\n))*{closing}"
    for opening, inside, closing in (('"', '"', '"'), ("'", "'", "'"), (r"\(", "()", r"\)"))
)
# `](` and the space before an inline link's destination; what may follow the destination
# (a title) up to its `)`; a destination in angle brackets.
_OPENING = re.compile(rf"\]{_GAP}\({_SPACE}")
_CLOSING = re.compile(rf"(?:(?:[ \t]+(?:\n[ \t]*)?|\n[ \t]*)(?:{_TITLE}))?{_SPACE}\)")
_BRACKETED = re.compile(r"<(?:[^<>\n\\]|\\.)*>")
# How deep parentheses in a bare destination may nest (cmark's and markdown-it's bound).
_MAX_NESTING = 32
# `][`: a reference link's label follows its text.
_REFERENCE = re.compile(rf"\]{_GAP}\[")
# `[label]: destination`; a label may hold escaped brackets and run over lines, not
# over a blank one. Disarmed: anything that starts like one, destination or not yet.
_LABEL_COLON = r"\[(?P<label>(?:[^\[\]\\\n]|\\.|\n(?![ \t]*\n))+)\]:"
_DEFINITION = re.compile(
    rf"{_LABEL_COLON}[ \t]*(?:\n[ \t]*)?(?:<(?P<bracketed>[^<>\n]*)>"
    r"|(?P<bare>[^\s<][^\s]*))"  # its parentheses balanced: `_bare_end` says
    # The destination ends its line, or a title does: else CommonMark takes none of it
    # for a definition, and its `[label]` may be a link (to another definition).
    rf"(?=[ \t]*(?:\n|\Z)|[ \t]+(?:{_TITLE})[ \t]*(?:\n|\Z))"
)
# A next line that opens a parenthesised title and is not that title alone: the spec reads
# a definition without a title, markdown-it none at all. Such a definition is doubtful:
# `disarm_doubtful_definitions` makes it text for both, and it defines nothing here.
_DOUBTFUL_TITLE = re.compile(r"[ \t]*\n[ \t]*\((?![^()\n]*\)[ \t]*(?:\n|\Z))")
_DEFINITION_START = re.compile(_LABEL_COLON)
# `<target|label>`: a Slack mrkdwn link (mentions and commands start with `@`, `#`, `!`).
_SLACK_LINK = re.compile(r"<(?P<target>[^!@#|<>\s][^|<>\s]*)\|(?P<label>[^<>]*)>")
# `<scheme:…>`: an autolink.
_AUTOLINK = re.compile(r"<(?P<target>[A-Za-z][A-Za-z0-9+.\-]{1,31}:[^<>\s|]*)>")
# What starts a bare URL, and what it runs over (what a streamed reply holds back until
# it ends: gateway.text.live_render reads both).
URL_STARTS = ("https://", "http://", "ftp://", "www.")
URL_CHARACTERS = r"[^\s<>]"
_BARE_URL = re.compile(
    f"(?:{'|'.join(map(re.escape, URL_STARTS))}){URL_CHARACTERS}+", re.IGNORECASE
)
_TRAILING = ".,;:!?*_~'\""

_PUNCTUATION = frozenset(string.punctuation)

Kind = Literal["link", "image", "slack", "autolink", "bare"]


@dataclass(frozen=True, slots=True)
class Link:
    """One link: `text[start:end]` is all of it; a reader sees `label` and it opens
    `target`. `label_at` is where the label is, for what sits inside it. An autolink and
    a bare URL are their own label; `by_reference`: its target is in a definition."""

    start: int
    end: int
    label: str
    target: str
    label_at: tuple[int, int]
    kind: Kind
    by_reference: bool = False


def find_links(text: str) -> list[Link]:
    """Every link of `text` outside code, in order of where it starts (see the module doc)."""
    masked = _masked(text)
    definitions = _Definitions(text, masked)
    found = _markdown_links(text, masked, definitions)
    found += [link for link in _slack_links(text, masked) if _fits(link, found)]
    found += list(_bare_urls(text, found))
    return sorted(found, key=lambda link: (link.start, link.end))


def disarm_definitions(text: str) -> str:
    """`text` with a backslash before the `[` of each definition outside code (and of
    each `[label]:` that may still become one): it defines nothing, and shows exactly as
    before."""
    pieces, position = [], 0
    for start in definition_starts(text):
        pieces += [text[position:start], "\\"]
        position = start
    return "".join([*pieces, text[position:]])


def disarm_doubtful_definitions(text: str) -> str:
    """`text` with a backslash before the `[` of each definition that parsers read two
    ways (see `_DOUBTFUL_TITLE`): text for every reader, it defines nothing."""
    doubtful = _Definitions(text, _masked(text)).doubtful
    pieces, position = [], 0
    for start in doubtful:
        pieces += [text[position:start], "\\"]
        position = start
    return "".join([*pieces, text[position:]])


def definition_starts(text: str) -> list[int]:
    """Where `disarm_definitions` puts its backslashes, in order."""
    masked = _masked(text)
    found = _DEFINITION_START.finditer(masked)
    return [m.start() for m in found if not _escaped(masked, m.start())]


class _Definitions:
    """The definitions of a text: their targets by label, and where they stand."""

    def __init__(self, text: str, masked: str) -> None:
        self.targets: dict[str, str] = {}
        self.spans: list[tuple[int, int]] = []
        self.doubtful: list[int] = []
        for match in _DEFINITION.finditer(masked):
            if _escaped(masked, match.start()):
                continue
            bare = match["bare"] is not None
            if bare and _bare_end(masked, match.start("bare")) != match.end("bare"):
                continue  # not a destination CommonMark reads: no definition at all
            group = "bare" if bare else "bracketed"
            label = _normalized(text[match.start("label") : match.end("label")])
            if _DOUBTFUL_TITLE.match(masked, match.end()):
                self.doubtful.append(match.start())
                continue
            self.targets.setdefault(label, text[match.start(group) : match.end(group)])
            self.spans.append((match.start(), match.end()))

    def target(self, label: str) -> str | None:
        return self.targets.get(_normalized(label))

    def holds(self, start: int, end: int) -> bool:
        """Whether `start:end` touches a definition (its label is no use of it)."""
        return any(s < end and start < e for s, e in self.spans)


def _markdown_links(text: str, masked: str, definitions: _Definitions) -> list[Link]:
    """Inline and reference links and images, innermost first."""
    closers = _bracket_pairs(masked)
    openers = {opener: close for close, opener in closers.items()}
    found: list[Link] = []
    for close in sorted(closers):
        opener = closers[close]
        if definitions.holds(opener, opener + 1):
            continue
        label = text[opener + 1 : close]
        ending = _ending(text, masked, close, label, openers, definitions)
        if ending is None:
            continue
        image = opener > 0 and masked[opener - 1] == "!" and not _escaped(masked, opener - 1)
        kind: Kind = "image" if image else "link"
        start = opener - 1 if image else opener
        end, target, by_reference = ending
        link = Link(start, end, label, target, (opener + 1, close), kind, by_reference)
        if _fits(link, found):
            found.append(link)
    return found


def _ending(
    text: str,
    masked: str,
    close: int,
    label: str,
    openers: dict[int, int],
    definitions: _Definitions,
) -> tuple[int, str, bool] | None:
    """Where the link whose text `label` ends at `close` ends, its target and whether that
    is by reference; None when no link ends there."""
    inline = _inline_destination(masked, close)
    if inline is not None:
        start, end, link_end = inline
        return link_end, text[start:end], False
    reference = _REFERENCE.match(masked, close)
    if reference is not None and (ref_close := openers.get(reference.end() - 1)) is not None:
        name = text[reference.end() : ref_close]
        target = definitions.target(name if name.strip() else label)  # `[text][]`: its own
        if target is not None:
            return ref_close + 1, target, True
    target = definitions.target(label)  # `[ref]` alone
    return (close + 1, target, True) if target is not None else None


def _inline_destination(masked: str, close: int) -> tuple[int, int, int] | None:
    """Where the destination of an inline link whose text ends at `close` starts and ends,
    and where the link ends; None when no `(destination "title")` follows."""
    opening = _OPENING.match(masked, close)
    if opening is None:
        return None
    start = opening.end()
    if masked.startswith("<", start):
        bracketed = _BRACKETED.match(masked, start)
        if bracketed is None:
            return None
        destination, after = (start + 1, bracketed.end() - 1), bracketed.end()
    else:
        bare_end = _bare_end(masked, start)
        if bare_end is None:
            return None
        destination, after = (start, bare_end), bare_end
    closing = _CLOSING.match(masked, after)
    return (*destination, closing.end()) if closing is not None else None


def _bare_end(text: str, start: int) -> int | None:
    """Where a bare destination starting at `start` ends, as CommonMark reads one: at a
    space or control character, or at a `)` it did not open; escaped parentheses do not
    count. None when its parentheses are left open or nest too deep."""
    depth, index = 0, start
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text) and text[index + 1] in _PUNCTUATION:
            index += 2
            continue
        if char <= " " or char == "\x7f" or (char == ")" and depth == 0):
            break
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth > _MAX_NESTING:
            return None
        index += 1
    return index if depth == 0 else None


def _slack_links(text: str, masked: str) -> Iterator[Link]:
    """`<target|label>` and `<url>`, each within the prose between fenced blocks."""
    for start, end, fenced in fenced_blocks(text):
        if fenced:
            continue
        for match in _SLACK_LINK.finditer(masked, start, end):
            at = (match.start("label"), match.end("label"))
            yield Link(
                match.start(), match.end(), text[at[0] : at[1]], match["target"], at, "slack"
            )
        for match in _AUTOLINK.finditer(masked, start, end):
            target = text[match.start("target") : match.end("target")]
            at = (match.start("target"), match.end("target"))
            yield Link(match.start(), match.end(), target, target, at, "autolink")


def _bare_urls(text: str, links: Sequence[Link]) -> Iterator[Link]:
    """URLs written out between the other links, which Slack links by itself, each ending
    where code or a link starts. (One in a definition too: a reader sees it where Slack
    does not take that for one.)"""
    gaps = list(_masked(text, span=" "))
    for link in links:
        gaps[link.start : link.end] = " " * (link.end - link.start)
    for match in _BARE_URL.finditer("".join(gaps)):
        url = _trimmed(text[match.start() : match.end()])
        end = match.start() + len(url)
        yield Link(match.start(), end, url, url, (match.start(), end), "bare")


def _trimmed(url: str) -> str:
    """A bare URL without the sentence's punctuation after it; a closing bracket is part
    of it only when it closes one opened inside it."""
    url = url.rstrip(_TRAILING)
    for opening, closing in ("()", "[]"):
        while url.endswith(closing) and url.count(closing) > url.count(opening):
            url = url[:-1].rstrip(_TRAILING)
    return url


def _fits(link: Link, found: Sequence[Link]) -> bool:
    """Whether `link` can be a link beside those `found` already. It may sit in another's
    label, or hold others in its own, except that a Markdown link holds no Markdown link;
    anything else that meets another (starts in a destination, a reference's `[ref]`, or
    crosses a link's end) is not a link. (Bare URLs are looked for between links only.)"""
    for other in found:
        if other.end <= link.start or link.end <= other.start:
            continue
        if _within(link, other.label_at) or _within(other, link.label_at):
            if link.kind == other.kind == "link":
                return False
            continue
        return False
    return True


def _within(link: Link, span: tuple[int, int]) -> bool:
    return span[0] <= link.start and link.end <= span[1]


def _normalized(label: str) -> str:
    """A label as CommonMark matches it: case-folded, its spaces collapsed."""
    return " ".join(label.split()).casefold()


def _bracket_pairs(text: str) -> dict[int, int]:
    """For each `]` that closes a `[` in the same paragraph, the index of that `[`."""
    pairs: dict[int, int] = {}
    openers: list[int] = []
    blank = True
    for index, char in enumerate(text):
        if char == "\n":
            if blank:
                openers.clear()  # a blank line ends the paragraph, and every open label
            blank = True
            continue
        if char not in " \t":
            blank = False
        if char == "[" and not _escaped(text, index):
            openers.append(index)
        elif char == "]" and openers and not _escaped(text, index):
            pairs[index] = openers.pop()
    return pairs


def _escaped(text: str, index: int) -> bool:
    before = index
    while before > 0 and text[before - 1] == "\\":
        before -= 1
    return (index - before) % 2 == 1


def _masked(text: str, *, span: str = "x") -> str:
    """`text` with its code made inert, positions unchanged: a fenced block becomes blank
    lines (it ends a paragraph), each character of a code span `span`."""
    pieces = []
    for start, end, fenced in fenced_blocks(text):
        prose = text[start:end]
        pieces.append("\n" * len(prose) if fenced else _spans_masked(prose, span))
    return "".join(pieces)


def _spans_masked(prose: str, span: str) -> str:
    pieces, position = [], 0
    for start, end in code_spans(prose):
        pieces += [prose[position:start], span * (end - start)]
        position = end
    return "".join([*pieces, prose[position:]])
