"""Slack markup to the plain text a person would read, before it reaches the model.

Slack delivers message text as mrkdwn with control sequences: `<@U123>` for a mention,
`<#C123|general>` for a channel, `<!here>`, `<https://x|label>`, and the entities `&lt;`,
`&gt;`, `&amp;`. The model should see what the author saw on screen (`@Ada`, `#general`,
`label (https://x)`), not the wire encoding, and the text must be storable in Postgres, which
refuses NUL characters and lone surrogates.

Sequences are parsed on the raw text first and entities decoded afterwards, piece by piece,
so `&lt;@U1&gt;` stays the literal text `<@U1>` and never becomes a mention.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from agent import storable_text

__all__ = ["clean_text", "escape_entities", "mentioned_user_ids", "slack_to_text"]

_SEQUENCE = re.compile(r"<([^<>]*)>")
_USER_MENTION = re.compile(r"<@([^<>|]+)(?:\|[^<>]*)?>")
_ENTITY = re.compile(r"&(lt|gt|amp);")
_ENTITIES = {"lt": "<", "gt": ">", "amp": "&"}
_BROADCASTS = frozenset({"here", "channel", "everyone"})
_NO_NAMES: Mapping[str, str] = {}


def clean_text(text: str) -> str:
    """Replace NUL and lone surrogates, which Postgres text cannot hold, with U+FFFD."""
    return storable_text(text)


def mentioned_user_ids(text: str) -> list[str]:
    """The user ids mentioned in raw Slack text, in order of appearance, without repeats."""
    return list(dict.fromkeys(match.group(1) for match in _USER_MENTION.finditer(text)))


def slack_to_text(
    text: str,
    *,
    user_names: Mapping[str, str] = _NO_NAMES,
    bot_user_id: str | None = None,
) -> str:
    """Render Slack mrkdwn as plain text; the bot's own mention disappears."""
    if bot_user_id is not None:
        text = _without_mentions_of(text, bot_user_id)
    pieces: list[str] = []
    position = 0
    for match in _SEQUENCE.finditer(text):
        pieces.append(_unescape(text[position : match.start()]))
        pieces.append(_render_sequence(match.group(1), user_names))
        position = match.end()
    pieces.append(_unescape(text[position:]))
    return clean_text("".join(pieces))


def _without_mentions_of(text: str, user_id: str) -> str:
    """Drop every mention of `user_id`, with the whitespace that follows it."""
    return re.sub(rf"<@{re.escape(user_id)}(?:\|[^<>]*)?>\s*", "", text)


def escape_entities(text: str) -> str:
    """Slack's escaping of `&`, `<` and `>`: what Slack does to typed text, and what mrkdwn
    text we send must do. The provenance tag escapes its bodies the same way."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _unescape(text: str) -> str:
    """Decode Slack's three entities in one pass, so `&amp;lt;` becomes `&lt;`."""
    return _ENTITY.sub(lambda match: _ENTITIES[match.group(1)], text)


def _render_sequence(inner: str, user_names: Mapping[str, str]) -> str:
    """One `<…>` sequence (without its brackets) as a reader would see it."""
    target, _, label = inner.partition("|")
    label = _unescape(label)
    if target.startswith("@"):
        user_id = target[1:]
        return "@" + (user_names.get(user_id) or label or user_id)
    if target.startswith("#"):
        return "#" + (label or target[1:])
    if target.startswith("!"):
        return _render_command(target[1:], label)
    return _render_link(_unescape(target), label)


def _render_command(command: str, label: str) -> str:
    """`<!here>`, `<!subteam^S1|@team>`, `<!date^…|fallback>` and the like."""
    if command in _BROADCASTS:
        return "@" + command
    kind, _, argument = command.partition("^")
    if kind == "subteam":
        return label or "@" + argument.partition("^")[0]
    if kind == "date":
        return label or _unescape(command)
    return label or "@" + _unescape(command)


def _render_link(url: str, label: str) -> str:
    """A link: the label and the address, or just one of them when they say the same."""
    address = url.split(":", 1)[1].removeprefix("//") if ":" in url else url
    if not label:
        return address if url.startswith("mailto:") else url
    if label in (url, address):
        return label
    return f"{label} ({url})"
