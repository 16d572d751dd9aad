"""The slash command: Slack's payload read once, and what the person typed after it.

Slack sends a slash command to the events URL as a form body (`command`, `text`,
`team_id`, `channel_id`, `user_id`, `trigger_id`, `response_url`, `api_app_id`, and on
Enterprise Grid `enterprise_id` and `is_enterprise_install`: docs.slack.dev "Implementing
slash commands"), signed like events; over Socket Mode the same fields come as the
`payload` of a `slash_commands` envelope. `slash_command` makes a `SlashCommand` of either,
or raises `MalformedEvent` (HTTP answers 400, Socket Mode acks and refuses it, as for a
malformed event). Slash commands are never sent from inside a thread, so a command acts
on a channel or a DM.

`parse_subcommand` reads the text: `help` (also empty), `status`, `stop`, `new`, `usage`,
`schedules`, `schedules delete ID`; words are case-insensitive and spaced any way, and
anything else is `Unknown`, answered with the help. It never raises: the text is the
person's, whatever they typed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, StringConstraints, ValidationError

from gateway.slack.events import MalformedEvent, SlackId, summary

DEFAULT_SLASH_COMMAND = "/threadgate"
# Slack's rule for a command's name: a slash and at most 32 characters in all, lower case.
_COMMAND_NAME = re.compile(r"/[a-z0-9][a-z0-9_.-]{0,30}")
# A trigger id ("13345224609.738474920.8088930838d88f008e0" in Slack's reference).
TriggerId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,200}$")]

Word: TypeAlias = Literal["help", "status", "stop", "new", "usage", "schedules"]
WORDS: tuple[Word, ...] = ("help", "status", "stop", "new", "usage", "schedules")


def check_command_name(name: str) -> str:
    """The command's name as Slack takes it, or ValueError saying what to write."""
    if not _COMMAND_NAME.fullmatch(name):
        raise ValueError(
            "expected a slash and a lower-case name of at most 31 letters, digits, _ . or -, "
            "such as /threadgate"
        )
    return name


class _Payload(BaseModel):
    command: str
    text: str = ""
    team_id: SlackId
    channel_id: SlackId
    user_id: SlackId
    trigger_id: TriggerId
    response_url: str = ""
    channel_name: str = ""
    enterprise_id: SlackId | None = None
    # Slack sends "true"/"false" in the form body; pydantic reads either.
    is_enterprise_install: bool = False


@dataclass(frozen=True, slots=True)
class SlashCommand:
    """One invocation: the tenant's team (the enterprise's for an org-wide install), the
    channel or DM it was typed in, who typed it and what, and its ids."""

    command: str
    text: str
    team: str
    channel: str
    user: str
    trigger_id: str
    response_url: str
    enterprise: str | None = None

    @property
    def direct(self) -> bool:
        """Typed in a DM (a direct message's id starts with D)."""
        return self.channel.startswith("D")

    @property
    def key(self) -> str:
        """What marks this invocation as acted on (its redeliveries carry the same)."""
        return f"command:{self.team}:{self.trigger_id}"


def slash_command(payload: Mapping[str, Any]) -> SlashCommand:
    """The invocation a payload carries, or `MalformedEvent`."""
    try:
        p = _Payload.model_validate(payload)
    except ValidationError as exc:
        raise MalformedEvent(f"slash command: {summary(exc)}") from exc
    org_wide = p.is_enterprise_install and p.enterprise_id is not None
    team = p.enterprise_id if org_wide and p.enterprise_id else p.team_id
    return SlashCommand(
        command=p.command,
        text=p.text,
        team=team,
        channel=p.channel_id,
        user=p.user_id,
        trigger_id=p.trigger_id,
        response_url=p.response_url,
        enterprise=p.enterprise_id,
    )


def is_slash_command(payload: Mapping[str, Any]) -> bool:
    """Whether a form body or envelope payload is a slash command (it names one)."""
    return isinstance(payload.get("command"), str) and "payload" not in payload


@dataclass(frozen=True, slots=True)
class Subcommand:
    """What the person asked: a word of `WORDS`; for `schedules delete`, the schedule id."""

    word: Word
    schedule_id: str | None = None


@dataclass(frozen=True, slots=True)
class Unknown:
    """Text that is no subcommand (kept short, for the answer to quote)."""

    text: str


Parsed: TypeAlias = Subcommand | Unknown
_QUOTED = 40


def parse_subcommand(text: str) -> Parsed:
    """What `text` asks (module docstring); never raises."""
    words = text.split()
    if not words:
        return Subcommand("help")
    first = words[0].lower()
    rest = [w.lower() for w in words[1:]]
    if first in WORDS and not rest:
        return Subcommand(_word(first))
    if first == "schedules" and len(rest) == 2 and rest[0] == "delete":
        schedule_id = rest[1].lstrip("#")
        if schedule_id.isascii() and schedule_id.isdigit() and len(schedule_id) <= 18:
            return Subcommand("schedules", schedule_id)
    return Unknown(" ".join(words)[:_QUOTED].rstrip())


def _word(first: str) -> Word:
    return next(w for w in WORDS if w == first)
