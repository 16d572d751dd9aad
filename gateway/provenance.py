"""The provenance tag: who said what, where and when, in a form no user text can forge.

Every user message reaches the model as
`<turn from="NAME" id="USER_ID" channel="CHANNEL_ID" at="ISO-8601">body</turn>`.
The body and attributes are escaped (`&`, `<`, `>`, and `"` in attributes), so whatever a
user types can never close this turn or open another.

Escaping ASCII is not enough for a reader that is a language model: `＜/turn＞` (fullwidth),
`‹/turn›` or `〈turn〉` read as a tag to it even though no parser would agree. So before
escaping, every character that looks like the tag's own syntax (`LOOKALIKES`: angle
brackets in their fullwidth, small, modifier, CJK, mathematical and ornamental forms, and
the fullwidth quotation mark) is folded to its ASCII form, and so ends up as `&lt;`, `&gt;`
or `&quot;` like the real thing. Characters that change what a reader sees without being
seen themselves are removed (`INVISIBLE`): Unicode tag characters (U+E0000–U+E007F, which
can spell out hidden ASCII instructions), bidirectional controls (U+202A–U+202E,
U+2066–U+2069, U+200E, U+200F, U+061C, which can reorder text so a tag appears where none
is), and the zero-width characters that only split or hide text (U+200B zero-width space,
U+2060 word joiner, U+2061–U+2064 invisible operators, U+FEFF, U+180E).

Kept on purpose: the zero-width joiner U+200D and non-joiner U+200C. They are part of
ordinary writing — ZWJ builds emoji sequences (woman + ZWJ + laptop is one emoji, a family
is several people joined by ZWJ) and conjuncts in Indic scripts, ZWNJ is required spelling
in Persian — and neither can reorder text or form a tag once the brackets are folded and
escaped. Removing them would change what people wrote; keeping them changes nothing the
tag relies on. (Subdivision flags such as Scotland's are spelled with tag characters; they
lose them and show as a plain black flag: hidden text is the larger risk.)

`parse_turn(render_turn(t))` gives back `t` with its fields folded and stripped
(`sanitize`): the turn as the model read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from gateway.markup import escape_entities

__all__ = [
    "INVISIBLE",
    "LOOKALIKES",
    "Turn",
    "TurnParseError",
    "parse_turn",
    "render_turn",
    "sanitize",
]

_TURN = re.compile(
    r'<turn from="(?P<name>[^"<>]*)" id="(?P<id>[^"<>]*)" channel="(?P<channel>[^"<>]*)"'
    r' at="(?P<at>[^"<>]*)">(?P<body>[^<>]*)</turn>',
    re.DOTALL,
)

LOOKALIKES: dict[str, str] = {
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

INVISIBLE: frozenset[str] = frozenset(
    [chr(c) for c in range(0xE0000, 0xE0080)]  # tag characters
    + [chr(c) for c in range(0x202A, 0x202F)]  # LRE, RLE, PDF, LRO, RLO
    + [chr(c) for c in range(0x2066, 0x206A)]  # LRI, RLI, FSI, PDI
    + ["\u200e", "\u200f", "\u061c"]  # LRM, RLM, ARABIC LETTER MARK
    + ["\u200b", "\u2060", "\u2061", "\u2062", "\u2063", "\u2064", "\ufeff", "\u180e"]
)
"""Characters removed from every field: invisible, and able to hide or reorder text."""

_SANITIZE = str.maketrans({**LOOKALIKES, **dict.fromkeys(INVISIBLE)})


@dataclass(frozen=True, slots=True)
class Turn:
    name: str
    user_id: str
    channel: str
    at: datetime
    body: str


class TurnParseError(ValueError):
    """The text is not exactly one well-formed turn."""


def sanitize(text: str) -> str:
    """Fold tag look-alikes to ASCII and drop invisible characters (see the module doc)."""
    return text.translate(_SANITIZE)


def escape_body(text: str) -> str:
    return escape_entities(sanitize(text))


def escape_attribute(text: str) -> str:
    return escape_entities(sanitize(text)).replace('"', "&quot;")


def unescape(text: str) -> str:
    return (
        text.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    )


def render_turn(turn: Turn) -> str:
    return (
        f'<turn from="{escape_attribute(turn.name)}" id="{escape_attribute(turn.user_id)}"'
        f' channel="{escape_attribute(turn.channel)}" at="{turn.at.isoformat()}">'
        f"{escape_body(turn.body)}</turn>"
    )


def parse_turn(text: str) -> Turn:
    match = _TURN.fullmatch(text)
    if match is None:
        raise TurnParseError("not a single well-formed <turn> element")
    try:
        at = datetime.fromisoformat(match["at"])
    except ValueError as exc:
        raise TurnParseError(f"bad `at` timestamp: {match['at']!r}") from exc
    return Turn(
        unescape(match["name"]),
        unescape(match["id"]),
        unescape(match["channel"]),
        at,
        unescape(match["body"]),
    )
