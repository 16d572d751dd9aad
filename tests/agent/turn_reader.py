"""How a reader finds turn tags in text: the oracle the containment tests check against.

Written apart from `agent.core.text` on purpose: the whole text is read the way a model
might read it — look-alike brackets and slashes taken for ASCII, whitespace and everything
that shows nothing skipped, letters folded in width and case — and then searched for
`<turn` or `</turn`. An escaped `&lt;turn` is no tag: that is how typed text reads too.
"""

from __future__ import annotations

import re
import unicodedata

from agent import TAG_LOOKALIKES

_UNSEEN = {"Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp"}
_BLANK_LETTERS = set("\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5")
_SLASHES = set("\u2044\u2215\u29f8\u2571")
_TURN = re.compile(r"</?turn")


def as_read(text: str) -> str:
    """`text` as a reader sees it, with what shows nothing left out."""
    shown = []
    for char in text:
        if char in _BLANK_LETTERS or unicodedata.category(char) in _UNSEEN:
            continue
        char = "/" if char in _SLASHES else TAG_LOOKALIKES.get(char, char)
        shown.append(unicodedata.normalize("NFKC", char).casefold())
    return "".join(shown)


def turn_tags(text: str) -> int:
    """How many turn tags (opening or closing) a reader finds in `text`."""
    return len(_TURN.findall(as_read(text)))
