"""The provenance tag: who said what, where and when, in a form no user text can forge.

Every user message reaches the model as
`<turn from="NAME" id="USER_ID" channel="CHANNEL_ID" at="ISO-8601">body</turn>`, with
`edited="ISO-8601"` after `at` once its author edited it, and `org="external"` last when its
author belongs to another organization (a Slack Connect channel that is answered: the
gatekeeper decides, from the author's team; no text of theirs can set it).
The body and attributes are escaped (`&`, `<`, `>`, and `"` in attributes), so whatever a
user types can never close this turn or open another.

Escaping ASCII is not enough for a reader that is a language model: `＜/turn＞` reads as a
tag to it. So every field is first passed through `agent.sanitize_text`, which folds tag
look-alikes (fullwidth, CJK, mathematical angle brackets and the like) to ASCII — they then
end up as `&lt;`/`&gt;`/`&quot;` like the real thing — and removes invisible characters
(Unicode tag characters, bidi controls, zero-width spaces; the zero-width joiner and
non-joiner stay, as emoji and several scripts need them). `agent/core/text.py` says which
characters and why; the round's frames around tool results use the same folding.

`parse_turn(render_turn(t))` gives back `t` with each field sanitized: the turn as the
model read it.

A schedule's run speaks in a turn of its own (`ScheduleTurn`):
`<turn schedule="ID" by="WHO" channel="CHANNEL_ID" at="ISO-8601">prompt</turn>`. No person's
turn can be read as one: a person's always opens with `from="`, which only
`render_turn` writes, and no field of it can hold a `"` to end an attribute early. The
system prompt says what a schedule's turn means (agent/rounds/schedule_tools.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from agent import sanitize_text
from gateway.text.markup import escape_entities

__all__ = [
    "ScheduleTurn",
    "Turn",
    "TurnParseError",
    "escape_body",
    "parse_schedule_turn",
    "parse_turn",
    "render_schedule_turn",
    "render_turn",
]

_TURN = re.compile(
    r'<turn from="(?P<name>[^"<>]*)" id="(?P<id>[^"<>]*)" channel="(?P<channel>[^"<>]*)"'
    r' at="(?P<at>[^"<>]*)"(?: edited="(?P<edited>[^"<>]*)")?(?: org="(?P<org>[^"<>]*)")?>'
    r"(?P<body>[^<>]*)</turn>",
    re.DOTALL,
)
_SCHEDULE_TURN = re.compile(
    r'<turn schedule="(?P<schedule>[^"<>]*)" by="(?P<by>[^"<>]*)" channel="(?P<channel>[^"<>]*)"'
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
    edited: datetime | None = None  # when its author last edited it (gateway/inbound/edits.py)
    # "external": its author belongs to another organization (Slack Connect); None: ours.
    org: str | None = None


class TurnParseError(ValueError):
    """The text is not exactly one well-formed turn."""


def escape_body(text: str) -> str:
    return escape_entities(sanitize_text(text))


def escape_attribute(text: str) -> str:
    return escape_entities(sanitize_text(text)).replace('"', "&quot;")


def unescape(text: str) -> str:
    return (
        text.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    )


def render_turn(turn: Turn) -> str:
    return (
        f'<turn from="{escape_attribute(turn.name)}" id="{escape_attribute(turn.user_id)}"'
        f' channel="{escape_attribute(turn.channel)}" at="{turn.at.isoformat()}"'
        f"{_edited(turn.edited)}{_org(turn.org)}>{escape_body(turn.body)}</turn>"
    )


def _edited(edited: datetime | None) -> str:
    return "" if edited is None else f' edited="{edited.isoformat()}"'


def _org(org: str | None) -> str:
    return "" if org is None else f' org="{escape_attribute(org)}"'


def parse_turn(text: str) -> Turn:
    match = _TURN.fullmatch(text)
    if match is None:
        raise TurnParseError("not a single well-formed <turn> element")
    try:
        at = datetime.fromisoformat(match["at"])
        edited = datetime.fromisoformat(match["edited"]) if match["edited"] else None
    except ValueError as exc:
        raise TurnParseError(f"bad `at` or `edited` timestamp in {text[:80]!r}") from exc
    return Turn(
        unescape(match["name"]),
        unescape(match["id"]),
        unescape(match["channel"]),
        at,
        unescape(match["body"]),
        edited,
        unescape(match["org"]) if match["org"] is not None else None,
    )


@dataclass(frozen=True, slots=True)
class ScheduleTurn:
    """A schedule's run: which schedule, who set it up (a Slack user id, or who at the
    command line), where it posts, the period it runs for, and its prompt."""

    schedule_id: str
    by: str
    channel: str
    at: datetime
    body: str


def render_schedule_turn(turn: ScheduleTurn) -> str:
    return (
        f'<turn schedule="{escape_attribute(turn.schedule_id)}" by="{escape_attribute(turn.by)}"'
        f' channel="{escape_attribute(turn.channel)}" at="{turn.at.isoformat()}">'
        f"{escape_body(turn.body)}</turn>"
    )


def parse_schedule_turn(text: str) -> ScheduleTurn:
    match = _SCHEDULE_TURN.fullmatch(text)
    if match is None:
        raise TurnParseError("not a single well-formed schedule <turn> element")
    try:
        at = datetime.fromisoformat(match["at"])
    except ValueError as exc:
        raise TurnParseError(f"bad `at` timestamp in {text[:80]!r}") from exc
    return ScheduleTurn(
        unescape(match["schedule"]),
        unescape(match["by"]),
        unescape(match["channel"]),
        at,
        unescape(match["body"]),
    )
