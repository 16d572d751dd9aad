"""Model text to Slack markdown while it is still being written.

`gateway.text.rendering` renders a whole reply: it knows where code spans and fenced blocks are,
and every link's target. A streamed reply is rendered piece by piece, and a piece must
never show something the rest of the text would have changed: a mention that forms once
its last character arrives, a link label whose host is revealed only once its URL is
complete. So `LiveRenderer` holds back every span that could still become such a thing
and renders only what is settled:

- from `<`, `&` or `@` until the next whitespace (a mention, an entity spelling of `<`,
  `@here`: none contains whitespace), and a Slack link `<url|text>` until its `>` or
  the end of its line;
- from `[` (an image's `![`) until the end of the line its `]` is on — or, while its
  `]` has not come, the end of its paragraph — and, when that `]` ends its line, through
  the next line if it opens with `(` (`[text]\n(url)`), so that a link is rendered whole;
- a word that is, or may still become, a bare URL (`h`, `http`, `https://…`, `www.…`)
  until the next whitespace, and a URL whole when another rule would cut it (at its
  `@`, say), so its host is judged on all of it; a `!` or a backslash at the end until
  what follows, which it may make an image or escape;
- from a run of backticks that no later run has closed yet until it is closed or its
  paragraph ends, because the run may open a code span (or, on a line of its own, a
  fenced block) that turns what follows into code;
- settled text gets the rendering's link check and the prose rule for mentions
  everywhere (`neutralize_everywhere`: code spans are not known yet, so code may carry
  an invisible joiner more than the final rendering gives it).

A reference definition (`[ref]: url`) may come at the end of a reply and turn text shown
long before into links, so streamed text has every definition disarmed
(`disarm_definitions`): while it streams, `[text][ref]` reads as written, and the final
rendering, with each use showing its host, replaces it at the end.

Settled text is rendered in its context, not on its own: the paragraph it belongs to, or
the fenced block it is in (`_Context`). A link after a fence line is code, and stays as
written, even when the fence line was settled and shown in an earlier piece; after the
closing fence line it is prose again.

What was streamed may thus differ from the final rendering by invisible characters, or
where a construct spans lines; the publisher compares the two when the reply is complete
and replaces the message's text with the final rendering when they differ.
"""

from __future__ import annotations

import re

from gateway.text.link_forms import (
    URL_CHARACTERS,
    URL_STARTS,
    definition_starts,
    disarm_definitions,
    find_links,
)
from gateway.text.links import reveal_link_hosts
from gateway.text.markdown import code_spans, fenced_blocks
from gateway.text.rendering import neutralize_everywhere

# Held from where they match in the line being written: a possible mention or entity
# until whitespace, a Slack link until its `>`, a `!` or backslash until what it makes an
# image or escapes.
_HELD_IN_LINE = (
    re.compile(r"[<&@]\S*$"),
    re.compile(r"<[^!@#|<>\s][^|<>\s]*\|[^<>]*$"),
    re.compile(r"[!\\]+$"),
)
_BRACKET = re.compile(r"[\[\]]")
_URL_WORD = re.compile(rf"{URL_CHARACTERS}+")
# `<` and the entity spellings of it that gateway.text.rendering joins before `!@#`.
_ENDS_WITH_LESS_THAN = re.compile(r"(?:<|&(?:lt|LT);|&#0*60;|&#[xX]0*3[cC];)$")
_PARAGRAPH_END = "\n\n"
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_BACKTICKS = re.compile(r"`+")


class LiveRenderer:
    """Renders a reply's text as it arrives; `feed` returns what may be shown now."""

    def __init__(self) -> None:
        self._pending = ""
        self._context = _Context()

    def feed(self, text: str) -> str:
        """Take more raw text; the rendered text now settled ("" when none)."""
        self._pending += text
        cut = _settled(self._context.raw, self._pending)
        settled, self._pending = self._pending[:cut], self._pending[cut:]
        return self._context.render(settled)

    def flush(self) -> str:
        """Everything held back, rendered (the reply is complete)."""
        rest, self._pending = self._pending, ""
        return self._context.render(rest)


class _Context:
    """The settled text that decides how the next settled piece renders: the current
    paragraph, or the current fenced block's fence line and current line (inside a fence,
    lines do not change each other; only a line can close it). With code in it, the
    context is rendered again with each new piece and the piece's rendering is what the
    longer rendering adds; without code (no backtick, no tilde) a piece renders the same
    on its own, which is cheaper. Either way a piece costs one paragraph at most, not the
    whole reply."""

    def __init__(self) -> None:
        self.raw = ""
        self._shown: str | None = ""  # the rendering of `raw`, when known

    def render(self, settled: str) -> str:
        if not settled:
            return ""
        combined = self.raw + settled
        if "`" in combined or "~" in combined:
            shown = render_settled(self.raw) if self._shown is None else self._shown
            whole = render_settled(combined)
            # When the new text changed how earlier text reads, the piece renders on its own;
            # the final update repairs the message.
            piece = whole[len(shown) :] if whole.startswith(shown) else render_settled(settled)
            self._shown = whole
        else:
            piece = render_settled(settled)
            self._shown = None
        self.raw = combined
        if "\n" in settled:  # only a line's end can end a paragraph or open or close a fence
            reduced = _reduced(self.raw)
            if reduced != self.raw:
                self.raw, self._shown = reduced, None
        # Each append must be safe on its own too: `@here` after `0` is no broadcast in the
        # whole text, but would be one in an append that starts with it.
        return neutralize_everywhere(piece)


def _reduced(raw: str) -> str:
    """The part of `raw` that can still change how later text renders."""
    start, fenced = _last_unit(raw)
    if not fenced:
        return raw[start:]
    if raw.endswith("\n") and not _last_unit(raw + "x")[1]:
        return ""  # the fence is closed: what follows starts afresh
    fence_line_end = raw.find("\n", start) + 1
    if not fence_line_end:  # the fence line is the last line, not ended yet
        return raw[start:]
    return raw[start:fence_line_end] + raw[max(fence_line_end, raw.rfind("\n") + 1) :]


def _last_unit(text: str) -> tuple[int, bool]:
    """Where the last paragraph or fenced block of `text` starts, and whether it is fenced:
    nothing before it changes how what follows renders."""
    pieces = fenced_blocks(text)
    if not pieces:
        return 0, False
    start, _, fenced = pieces[-1]
    if fenced:
        return start, True
    breaks = list(_BLANK_LINE.finditer(text, start))
    return (breaks[-1].end() if breaks else start), False


def render_settled(text: str) -> str:
    """Settled text as it is streamed to Slack."""
    return neutralize_everywhere(reveal_link_hosts(disarm_definitions(text))) if text else ""


def _settled(context: str, pending: str) -> int:
    """How much of `pending` is settled: everything before the first held-back span."""
    growing = len(pending) - len(pending.rstrip("`"))
    if growing:
        # A run of backticks at the end may still grow (into one that closes nothing, or
        # opens a fence): held, and what is before it judged without it.
        return min(_settled(context, pending[:-growing]), len(pending) - growing)
    line_start = pending.rfind("\n") + 1
    partial = pending[line_start:]
    in_line = [_held_url(partial), *(_start(p.search(partial)) for p in _HELD_IN_LINE)]
    holds = [line_start + h for h in in_line if h is not None]
    link = _held_link(pending, line_start)
    cut = min([len(pending), *holds, *([] if link is None else [link])])
    # Last, on what is left: a run closed only by held-back text is still open. Cutting at
    # the first open run leaves every earlier span whole, so one pass is enough.
    backticks = _open_backticks(context, pending[:cut])
    cut = _before_url(context, pending, cut if backticks is None else backticks)
    # Never between a `<` (or an entity spelling of one) and what follows it: the `!` of
    # an image held back would make `<!` with it once both are shown.
    before = _ENDS_WITH_LESS_THAN.search(pending, 0, cut)
    return cut if before is None else before.start()


def _before_url(context: str, pending: str, cut: int) -> int:
    """`cut`, or the start of the bare URL it would cut (at its `@`, `&`, `[` or a
    backtick): a URL is judged whole, in its context, as `render_settled` will see it."""
    if cut == len(pending) or not _url_word_at(pending, cut):
        return cut  # nothing held, or no URL to cut there
    text = context + pending
    starts = definition_starts(text)

    def in_pending(index: int) -> int:  # an index of `text` disarmed, as one of `pending`
        return index - sum(1 for n, start in enumerate(starts) if start + n < index) - len(context)

    for url in find_links(disarm_definitions(text)):
        start, end = in_pending(url.start), in_pending(url.end)
        if url.kind == "bare" and start < cut < end:
            return max(start, 0)
    return cut


def _url_word_at(pending: str, cut: int) -> bool:
    """Whether the word `cut` falls inside (a run of URL characters) may hold a URL: the
    cheap look before `_before_url`'s full one."""
    after = _URL_WORD.match(pending, cut)
    start = cut
    while start > 0 and _URL_WORD.match(pending[start - 1]):
        start -= 1
    word = pending[start : after.end() if after else cut].lower()
    return start < cut and after is not None and ("://" in word or "www." in word)


def _open_backticks(context: str, pending: str) -> int | None:
    """Where, in `pending`, a run of backticks starts that nothing has closed yet, in the
    last paragraph outside fenced blocks (a fence's own lines are judged once complete)."""
    text = context + pending
    if "`" not in text:
        return None
    start, fenced = _last_unit(text)
    if fenced:
        return None
    paragraph = text[start:]
    spans = code_spans(paragraph)
    for run in _BACKTICKS.finditer(paragraph):
        if any(s <= run.start() < e for s, e in spans):
            continue
        if run.start() > 0 and paragraph[run.start() - 1] == "\\" and len(run.group()) == 1:
            continue  # a literal backtick
        return max(0, start + run.start() - len(context))
    return None


def _start(match: re.Match[str] | None) -> int | None:
    return None if match is None else match.start()


def _held_link(pending: str, line_start: int) -> int | None:
    """Where a link that may not be whole yet starts, in the last paragraph of `pending`:
    at a `[` not closed yet, closed on the line still being written, or closed at the end
    of the last whole line while the next may still open its `(url)`."""
    paragraph = pending.rfind(_PARAGRAPH_END)
    start = 0 if paragraph < 0 else paragraph + len(_PARAGRAPH_END)
    partial = pending[line_start:].lstrip(" \t")
    continued = not partial or partial.startswith("(")
    openers: list[int] = []
    held: list[int] = []
    for bracket in _BRACKET.finditer(pending, start):
        index = bracket.start()
        if bracket.group() == "[":
            openers.append(index)
        elif openers:
            opener = openers.pop()
            ends_line = line_start > 0 and not pending[index + 1 : line_start - 1].strip(" \t")
            if index >= line_start or (continued and ends_line):
                held.append(opener)
    first = min([*openers[:1], *held], default=None)
    # With what changes how it reads: an image's `!`, a backslash that escapes it.
    while first is not None and first > 0 and pending[first - 1] in "!\\":
        first -= 1
    return first


def _held_url(partial: str) -> int | None:
    """Where, in the line being written, the last word has a part that is or may become a
    bare URL (one may start anywhere in a word, as `gateway.text.link_forms` finds them)."""
    word_start = len(partial)
    while word_start > 0 and _URL_WORD.match(partial[word_start - 1]):
        word_start -= 1
    for start in range(word_start, len(partial)):
        rest = partial[start:].lower()
        if any(s.startswith(rest) or rest.startswith(s) for s in URL_STARTS):
            return start
    return None
