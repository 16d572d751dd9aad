"""Text every part of the system can hold, and that no reader mistakes for markup.

## Storable

Postgres `text` and `jsonb` refuse NUL, and a lone surrogate cannot be encoded as UTF-8 at
all, so a message containing either fails wherever it goes next: a person's turn at
admission, a model's reply at the append, a subtask's params at the insert. A model can
produce both (JSON's `\\u0000` and `\\ud800` escapes decode to them). Both are replaced with
U+FFFD, the character that says "something unreadable was here", at the two doors text
comes in by: the gatekeeper for people, the control tools for the model.

## Unmistakable

The gateway escapes what people write so it cannot close a `<turn>` tag, and the round
escapes what tools return so it cannot close its `<tool_output>` frame. Escaping ASCII is
not enough for a reader that is a language model: `＜/turn＞` (fullwidth), `‹/turn›` or
`〈turn〉` read as a tag to it even though no parser would agree. So before escaping, every
character that looks like a tag's own syntax (`TAG_LOOKALIKES`: angle brackets in their
fullwidth, small, modifier, CJK, mathematical and ornamental forms, and the fullwidth
quotation mark) is folded to its ASCII form, and is then escaped like the real thing.

Characters that change what a reader sees without being seen themselves are removed
(`INVISIBLE_CHARACTERS`): Unicode tag characters (U+E0000–U+E007F, which can spell out
hidden ASCII instructions), bidirectional controls (U+202A–U+202E, U+2066–U+2069, U+200E,
U+200F, U+061C, which can reorder text so a tag appears where none is), and the
zero-width characters that only split or hide text (U+200B zero-width space, U+2060 word
joiner, U+2061–U+2064 invisible operators, U+FEFF, U+180E).

Kept on purpose: the zero-width joiner U+200D and non-joiner U+200C. They are part of
ordinary writing — ZWJ builds emoji sequences (woman + ZWJ + laptop is one emoji, a family
is several people joined by ZWJ) and conjuncts in Indic scripts, ZWNJ is required spelling
in Persian — and neither can reorder text or form a tag once the brackets are folded and
escaped. Removing them would change what people wrote; keeping them changes nothing a tag
relies on. (Subdivision flags such as Scotland's are spelled with tag characters; they lose
them and show as a plain black flag: hidden text is the larger risk.) Variation selectors
stay too: emoji presentation needs them.

## Tags no person wrote

People's words reach the model inside turn tags the gateway writes, and typed text has
every `<` escaped, so no person can forge a turn, nor a runtime note of the host's
(`NOTE_TAG`, agent/core/notes.py). Text that is not typed — what a tool or
a web page returned, what a sub-agent or a summary wrote, the model's own earlier replies —
keeps its brackets (code and HTML must stay readable), so there the opening bracket of
each tag that matters — a turn's and a runtime note's — is escaped instead
(`escape_tag_openings`, `neutralize_turns`). The
bracket is found the way a reader would find it: `<` or a look-alike, then, skipping
whitespace and every character that shows nothing (format and control characters,
combining marks, Hangul fillers), an optional slash or one of its look-alikes, then the
tag's name, its letters compared after width and case folding (NFKC: `ＴＵＲＮ`, `𝐭𝐮𝐫𝐧`
read as `turn`). Only that bracket changes, to `&lt;`, the same escape typed text gets;
everything else is left as it was. Letters of other scripts that merely resemble Latin
ones (a Cyrillic `т`) are not folded: to a model's tokenizer they spell another word.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from typing import Any

__all__ = [
    "INVISIBLE_CHARACTERS",
    "TAG_LOOKALIKES",
    "escape_tag_openings",
    "neutralize_turns",
    "sanitize_text",
    "storable_json",
    "storable_text",
]

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """`text` with NUL and lone surrogates replaced by U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


def storable_json(value: Any) -> Any:
    """A decoded JSON value with every string in it (keys included) made storable."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list):
        return [storable_json(item) for item in value]
    if isinstance(value, dict):
        return {storable_text(str(k)): storable_json(v) for k, v in value.items()}
    return value


TAG_LOOKALIKES: dict[str, str] = {
    "\uff1c": "<",  # ＜ FULLWIDTH LESS-THAN SIGN
    "\uff1e": ">",  # ＞ FULLWIDTH GREATER-THAN SIGN
    "\ufe64": "<",  # ﹤ SMALL LESS-THAN SIGN
    "\ufe65": ">",  # ﹥ SMALL GREATER-THAN SIGN
    "\u2039": "<",  # ‹ SINGLE LEFT-POINTING ANGLE QUOTATION MARK
    "\u203a": ">",  # › SINGLE RIGHT-POINTING ANGLE QUOTATION MARK
    "\u3008": "<",  # 〈 LEFT ANGLE BRACKET (CJK)
    "\u3009": ">",  # 〉 RIGHT ANGLE BRACKET (CJK)
    "\u2329": "<",  # 〈 LEFT-POINTING ANGLE BRACKET
    "\u232a": ">",  # 〉 RIGHT-POINTING ANGLE BRACKET
    "\u27e8": "<",  # ⟨ MATHEMATICAL LEFT ANGLE BRACKET
    "\u27e9": ">",  # ⟩ MATHEMATICAL RIGHT ANGLE BRACKET
    "\u29fc": "<",  # ⧼ LEFT-POINTING CURVED ANGLE BRACKET
    "\u29fd": ">",  # ⧽ RIGHT-POINTING CURVED ANGLE BRACKET
    "\u276c": "<",  # ❬ MEDIUM LEFT-POINTING ANGLE BRACKET ORNAMENT
    "\u276d": ">",  # ❭ MEDIUM RIGHT-POINTING ANGLE BRACKET ORNAMENT
    "\u276e": "<",  # ❮ HEAVY LEFT-POINTING ANGLE QUOTATION MARK ORNAMENT
    "\u276f": ">",  # ❯ HEAVY RIGHT-POINTING ANGLE QUOTATION MARK ORNAMENT
    "\u2770": "<",  # ❰ HEAVY LEFT-POINTING ANGLE BRACKET ORNAMENT
    "\u2771": ">",  # ❱ HEAVY RIGHT-POINTING ANGLE BRACKET ORNAMENT
    "\u02c2": "<",  # ˂ MODIFIER LETTER LEFT ARROWHEAD
    "\u02c3": ">",  # ˃ MODIFIER LETTER RIGHT ARROWHEAD
    "\u1438": "<",  # ᐸ CANADIAN SYLLABICS PA
    "\u1433": ">",  # ᐳ CANADIAN SYLLABICS PO
    "\uff02": '"',  # ＂ FULLWIDTH QUOTATION MARK: would seem to close an attribute
}
"""Characters a reader takes for `<`, `>` or `"`, and the ASCII they are folded to."""

INVISIBLE_CHARACTERS: frozenset[str] = frozenset(
    [chr(c) for c in range(0xE0000, 0xE0080)]  # tag characters
    + [chr(c) for c in range(0x202A, 0x202F)]  # LRE, RLE, PDF, LRO, RLO
    + [chr(c) for c in range(0x2066, 0x206A)]  # LRI, RLI, FSI, PDI
    + ["\u200e", "\u200f", "\u061c"]  # LRM, RLM, ARABIC LETTER MARK
    + ["\u200b", "\u2060", "\u2061", "\u2062", "\u2063", "\u2064", "\ufeff", "\u180e"]
)
"""Characters removed before escaping: invisible, and able to hide or reorder text."""

_SANITIZE = str.maketrans({**TAG_LOOKALIKES, **dict.fromkeys(INVISIBLE_CHARACTERS)})


def sanitize_text(text: str) -> str:
    """Fold tag look-alikes to ASCII and drop invisible characters (see the module doc)."""
    return text.translate(_SANITIZE)


TURN_TAG = "turn"
"""The name of the provenance tag the gateway puts around people's messages."""

NOTE_TAG = "runtime"
"""The name of the tag around a note the host adds (agent/core/notes.py)."""

_OPENER = re.compile(f"[<{''.join(c for c, ascii in TAG_LOOKALIKES.items() if ascii == '<')}]")
# Slashes NFKC leaves alone: the fraction, division and big solidus, the box diagonal.
_SLASHES = frozenset(["\u2044", "\u2215", "\u29f8", "\u2571"])
_SHOW_NOTHING = frozenset(["Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp"])
# Letters (category Lo) that draw nothing: Hangul fillers, the braille blank, Khmer's
# inherent vowels.
_BLANK_LETTERS = frozenset(["\u115f", "\u1160", "\u3164", "\uffa0", "\u2800", "\u17b4", "\u17b5"])


def escape_tag_openings(text: str, tags: Collection[str]) -> str:
    """`text` with the bracket that opens each `<tag` or `</tag` of `tags` (lower-case
    names) replaced by `&lt;`, as a reader finds them (see the module doc)."""
    longest = max((len(tag) for tag in tags), default=0) + 1
    pieces: list[str] = []
    position = 0
    for opener in _OPENER.finditer(text):
        if _names_a_tag(_reading(text, opener.end(), longest), tags):
            pieces += [text[position : opener.start()], "&lt;"]
            position = opener.end()
    return "".join([*pieces, text[position:]]) if pieces else text


def neutralize_turns(text: str) -> str:
    """`text` with every turn tag, and every runtime note's tag, in it escaped: it can
    neither open nor close a turn, nor pass for a note of the host's."""
    return escape_tag_openings(text, (TURN_TAG, NOTE_TAG))


def _names_a_tag(reading: str, tags: Collection[str]) -> bool:
    name = reading[1:] if reading.startswith("/") else reading
    return any(name.startswith(tag) for tag in tags)


def _reading(text: str, start: int, length: int) -> str:
    """The first `length` (or a few more) characters a reader sees from `start`."""
    seen = ""
    for index in range(start, len(text)):
        seen += _folded(text[index])
        if len(seen) >= length:
            break
    return seen


def _folded(char: str) -> str:
    """`char` as a reader takes it: "" if it shows nothing, else width and case folded."""
    if char in _BLANK_LETTERS or unicodedata.category(char) in _SHOW_NOTHING:
        return ""
    if char in _SLASHES:
        return "/"
    return unicodedata.normalize("NFKC", TAG_LOOKALIKES.get(char, char)).casefold()
