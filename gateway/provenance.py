"""The provenance tag: who said what, where and when, in a form no user text can forge.

Every user message reaches the model as
`<turn from="NAME" id="USER_ID" channel="CHANNEL_ID" at="ISO-8601">body</turn>`.
The body and attributes are escaped (`&`, `<`, `>`, and `"` in attributes), so whatever a
user types can never close this turn or open another: `parse_turn(render_turn(t)) == t`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from gateway.markup import escape_entities

_TURN = re.compile(
    r'<turn from="(?P<name>[^"<>]*)" id="(?P<id>[^"<>]*)" channel="(?P<channel>[^"<>]*)"'
    r' at="(?P<at>[^"<>]*)">(?P<body>[^<>]*)</turn>',
    re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class Turn:
    name: str
    user_id: str
    channel: str
    at: datetime
    body: str


class TurnParseError(ValueError):
    """The text is not exactly one well-formed turn."""


def escape_body(text: str) -> str:
    return escape_entities(text)


def escape_attribute(text: str) -> str:
    return escape_entities(text).replace('"', "&quot;")


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
