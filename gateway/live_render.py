"""Model text to Slack markdown while it is still being written.

`gateway.rendering` renders a whole reply: it knows where code spans and fenced blocks are,
and every link's target. A streamed reply is rendered piece by piece, and a piece must
never show something the rest of the text would have changed: a mention that forms once
its last character arrives, a link label whose host is revealed only once its URL is
complete. So `LiveRenderer` holds back every span that could still become such a thing
and renders only what is settled:

- from `<`, `&` or `@` until the next whitespace (a mention, an entity spelling of `<`,
  `@here`: none contains whitespace);
- from `[` until the end of its line — or, while its `]` has not come, the end of its
  paragraph — so that a link is rendered whole;
- settled text gets the rendering's link check and the prose rule for mentions
  everywhere (`neutralize_everywhere`: code spans are not known yet, so code may carry
  an invisible joiner more than the final rendering gives it).

What was streamed may thus differ from the final rendering by invisible characters, or
where a construct spans lines; the publisher compares the two when the reply is complete
and replaces the message's text with the final rendering when they differ.
"""

from __future__ import annotations

import re

from gateway.links import reveal_link_hosts
from gateway.rendering import neutralize_everywhere

_HOLD_TO_SPACE = re.compile(r"[<&@]\S*$")
_PARAGRAPH_END = "\n\n"


class LiveRenderer:
    """Renders a reply's text as it arrives; `feed` returns what may be shown now."""

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, text: str) -> str:
        """Take more raw text; the rendered text now settled ("" when none)."""
        self._pending += text
        cut = _settled(self._pending)
        settled, self._pending = self._pending[:cut], self._pending[cut:]
        return render_settled(settled)

    def flush(self) -> str:
        """Everything held back, rendered (the reply is complete)."""
        rest, self._pending = self._pending, ""
        return render_settled(rest)


def render_settled(text: str) -> str:
    """Settled text as it is streamed to Slack."""
    return neutralize_everywhere(reveal_link_hosts(text)) if text else ""


def _settled(pending: str) -> int:
    """How much of `pending` is settled: everything before the first held-back span."""
    cut = len(pending)
    bracket = _open_bracket(pending)
    if bracket is not None:
        cut = bracket
    line_start = pending.rfind("\n") + 1
    partial = pending[line_start:]
    held = _HOLD_TO_SPACE.search(partial)
    if held is not None:
        cut = min(cut, line_start + held.start())
    if "[" in partial:
        cut = min(cut, line_start + partial.index("["))
    return cut


def _open_bracket(pending: str) -> int | None:
    """Where a `[` whose `]` has not come yet starts, within the current paragraph."""
    paragraph = pending.rfind(_PARAGRAPH_END)
    start = 0 if paragraph < 0 else paragraph + len(_PARAGRAPH_END)
    depth, opened = 0, None
    for index in range(start, len(pending)):
        char = pending[index]
        if char == "[":
            if depth == 0:
                opened = index
            depth += 1
        elif char == "]" and depth:
            depth -= 1
    return opened if depth else None
