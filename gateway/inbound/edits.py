"""Slack's `message_changed` and `message_deleted` events, as typed records.

`gateway/slack/events.py` reads the events that may need an answer; this module reads the two
that change a message after the fact. Both are `message` events with a subtype:

- `message_changed`: `event.message` is the message as it is now (its `ts` is the edited
  message's), `event.previous_message` as it was, `event.channel` where. It becomes an
  `Edit` whose `turn` is the new message as an `InboundTurn`, so the gatekeeper renders it
  exactly like a new one (with an `edited` time for the provenance tag). Slack also sends
  it when a link unfurls (text unchanged: nothing to do) and, with `message.subtype`
  `tombstone`, when a thread's first message is deleted while replies remain (a deletion).
- `message_deleted`: `event.deleted_ts` is the message that is gone. It becomes a
  `Deletion`.

Changes to bot messages (ours included) are None: acked quietly. A payload that claims to
be one of these events but lacks what it must have (an object `message`, a channel, a
Slack ts) is a `MalformedEvent`, answered 400 like a malformed message event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gateway.slack.events import (
    EventId,
    InboundTurn,
    MalformedEvent,
    SlackId,
    SlackTs,
    Tenant,
    event_tenant,
    message_turn,
    summary,
)

M = TypeVar("M", bound=BaseModel)

CHANGE_SUBTYPES = frozenset({"message_changed", "message_deleted"})


@dataclass(frozen=True, slots=True)
class Edit:
    """A person edited a message: `turn` is the message as it is now; `previous_text`
    what it said before (None when Slack did not say)."""

    turn: InboundTurn
    previous_text: str | None

    @property
    def event_id(self) -> str | None:
        return self.turn.event_id


@dataclass(frozen=True, slots=True)
class Deletion:
    """A message was deleted (`team`: the tenant's, `gateway.slack.events.Tenant`)."""

    team: str
    channel: str
    ts: str
    event_id: str | None

    @property
    def task_id(self) -> str:
        return f"{self.team}:{self.channel}:{self.ts}"


class _Envelope(BaseModel):
    event_id: EventId | None = None
    event: dict[str, Any]


class _Changed(BaseModel):
    channel: SlackId
    ts: SlackTs  # when the edit happened
    channel_type: str | None = None
    message: dict[str, Any]
    previous_message: dict[str, Any] | None = None


class _Deleted(BaseModel):
    channel: SlackId
    deleted_ts: SlackTs
    previous_message: dict[str, Any] | None = None


class _Ts(BaseModel):
    ts: SlackTs


def inbound_change(body: Mapping[str, Any]) -> Edit | Deletion | None:
    """The edit or deletion this payload reports, None if it is neither (or a bot's)."""
    event = body.get("event")
    if body.get("type") != "event_callback" or not isinstance(event, Mapping):
        return None
    if event.get("type") != "message" or event.get("subtype") not in CHANGE_SUBTYPES:
        return None
    envelope = _validated(_Envelope, body, "event envelope")
    tenant = event_tenant(body)
    if event["subtype"] == "message_deleted":
        deleted = _validated(_Deleted, event, "message_deleted event")
        if _from_bot(deleted.previous_message or {}):
            return None
        return Deletion(tenant.team, deleted.channel, deleted.deleted_ts, envelope.event_id)
    return _edit(tenant, envelope, _validated(_Changed, event, "message_changed event"))


def _edit(tenant: Tenant, envelope: _Envelope, changed: _Changed) -> Edit | Deletion | None:
    message = changed.message
    ts = _validated(_Ts, message, "message_changed event: message").ts
    if message.get("subtype") == "tombstone":
        return Deletion(tenant.team, changed.channel, ts, envelope.event_id)
    if _from_bot(message) or message.get("user") is None:
        return None  # bots (ours included) and system messages are not people's turns
    previous = changed.previous_message
    previous_text = previous.get("text") if previous is not None else None
    if isinstance(previous_text, str) and previous_text == message.get("text"):
        return None  # an unfurl or another change that leaves the words as they were
    event = {**message, "type": "message", "channel": changed.channel}
    event["channel_type"] = changed.channel_type
    try:
        turn = message_turn(tenant, envelope.event_id, event, edited=changed.ts)
    except MalformedEvent as exc:
        raise MalformedEvent(f"message_changed event: {exc}") from None
    return Edit(turn, previous_text if isinstance(previous_text, str) else None)


def _from_bot(message: Mapping[str, Any]) -> bool:
    return bool(message.get("bot_id") or message.get("bot_profile")) or (
        message.get("subtype") == "bot_message"
    )


def _validated(model: type[M], data: Any, what: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise MalformedEvent(f"{what}: {summary(exc)}") from exc
