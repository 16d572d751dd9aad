"""Pins: a message pinned in a thread stays in the model's window (issue 12).

Slack sends `pin_added` and `pin_removed` (scope `pins:read`) with the pinned item; for a
message, `item.message` carries its ts, thread, author and text, and `channel_id` its
channel. `pin_change` turns the payload into a `PinChange` (or None for anything else, a
400 for a malformed one); `Pins.apply` stores it (storage/pins.py) before the listener
returns, over HTTP and Socket Mode alike, so a redelivery finds the work done.

A pin of a message we store (a person's turn, a back-filled message, our reply or
acknowledgment) flags it. A pin of a person's message we never stored, in a conversation
we keep, stores it as a retained turn, rendered as the gatekeeper renders back-filled
messages (names looked up within `lookup_budget_seconds`; without them the ids stand in).
Anything else — a file pinned, a thread the bot takes no part in, another bot's message
we never stored — is ignored. A failure (the database away) is logged and the pin
ignored: the event is acked all the same, a pin is never worth a Slack retry storm.

A pin keeps its whole turn in the bot's memory (a pinned answer its question, a pinned
question its answer: storage/pins.py). No pin is dropped: past the room the window has
for pins (`PinRoom`: THREADGATE_PINNED_MAX pins, within THREADGATE_HISTORY_CHARS) the
older ones are listed to the model by who wrote them and their first words instead of
shown whole, and the person whose pin moved pins there is told which, privately
(`chat.postEphemeral` in the thread, within `lookup_budget_seconds`: the pin is theirs to
weigh, and nobody else's business): running out of room is never silent. The notice
quotes the start of each message, escaped and neutralized like anything we post.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, Field, ValidationError
from slack_sdk.web.async_client import AsyncWebClient

from gateway.slack.errors import SlackError, slack_deadline
from gateway.slack.events import MalformedEvent, event_tenant
from gateway.slack.threads import ThreadMessage, render_message
from gateway.slack.users import NameDirectory
from gateway.text.markup import escape_entities, mentioned_user_ids
from gateway.text.provenance import TurnParseError, parse_turn
from gateway.text.rendering import neutralize_everywhere
from storage import (
    Database,
    ListedPin,
    Pinned,
    PinnedMessage,
    PinRoom,
    clear_pin,
    flag_pin,
    retain_pin,
    session_known,
)

log = logging.getLogger(__name__)

PinOutcome: TypeAlias = Literal["pinned", "retained", "unpinned", "ignored", "failed"]
_PIN_EVENTS = ("pin_added", "pin_removed")


class _Message(BaseModel):
    ts: str = Field(pattern=r"^[0-9]{1,12}\.[0-9]{1,9}$")
    thread_ts: str | None = None
    user: str | None = None
    text: str = ""
    bot_id: str | None = None
    subtype: str | None = None


class _Item(BaseModel):
    type: str
    message: _Message | None = None


class _PinEvent(BaseModel):
    type: Literal["pin_added", "pin_removed"]
    channel_id: str
    item: _Item
    user: str | None = None  # who pinned or unpinned


class _Envelope(BaseModel):
    event: _PinEvent


@dataclass(frozen=True, slots=True)
class PinChange:
    """A message pinned (`added`) or unpinned in a channel."""

    added: bool
    team: str  # the tenant's (`gateway.slack.events.Tenant`)
    channel: str
    ts: str
    thread_ts: str | None
    author: ThreadMessage | None  # a person's message, as the gatekeeper would render it
    by: str | None = None  # who pinned or unpinned it

    @property
    def thread(self) -> str | None:
        """The thread the message is in (its own ts for a thread's parent), None for a
        top-level DM message (the DM's running conversation)."""
        if self.thread_ts:
            return self.thread_ts
        return None if self.channel.startswith("D") else self.ts

    @property
    def session_id(self) -> str:
        """The conversation the message belongs to (as `InboundTurn.session_id` spells it)."""
        if self.thread_ts and self.thread_ts != self.ts:
            return f"{self.team}:{self.channel}:{self.thread_ts}"
        if self.channel.startswith("D"):  # a top-level DM continues the DM's conversation
            return f"{self.team}:{self.channel}"
        return f"{self.team}:{self.channel}:{self.ts}"

    def stored_as(self) -> PinnedMessage:
        where = f"{self.team}:{self.channel}:{self.ts}"
        backfilled = f"slack:{where}"
        return PinnedMessage(
            self.session_id, self.ts, (f"task:{where}:user", backfilled), backfilled
        )


def pin_change(body: Mapping[str, Any]) -> PinChange | None:
    """The pin this payload reports, None if it is not a pin of a message."""
    event = body.get("event")
    if body.get("type") != "event_callback" or not isinstance(event, Mapping):
        return None
    if event.get("type") not in _PIN_EVENTS:
        return None
    try:
        envelope = _Envelope.model_validate(body)
    except ValidationError as exc:
        raise MalformedEvent(f"{event.get('type')} event: {exc.error_count()} problem(s)") from exc
    pin = envelope.event
    message = pin.item.message
    if pin.item.type != "message" or message is None:
        return None
    author = None
    if message.user and not (message.bot_id or message.subtype):
        author = ThreadMessage(message.user, message.text, message.ts)
    return PinChange(
        added=pin.type == "pin_added",
        team=event_tenant(body).team,
        channel=pin.channel_id,
        ts=message.ts,
        thread_ts=message.thread_ts,
        author=author,
        by=pin.user,
    )


class Pins:
    """Keeps pinned messages in their conversation's memory (storage/pins.py)."""

    def __init__(
        self,
        db: Database,
        users: NameDirectory,
        *,
        room: PinRoom,
        lookup_budget_seconds: float,
        client: AsyncWebClient | None = None,
        on_listed: Callable[[int], None] | None = None,
    ) -> None:
        self._db = db
        self._users = users
        self._client = client  # tells the person whose pin moved pins to the list; None: no one
        self._room = room
        self._budget = lookup_budget_seconds
        self._on_listed = on_listed  # counts the pins a pin moved to the list

    async def apply(self, change: PinChange, *, bot_user_id: str | None) -> PinOutcome:
        """Store the pin or its removal; never raises (a failure is logged, and ignored)."""
        if self._room.max_shown == 0:
            return "ignored"
        try:
            return await self._apply(change, bot_user_id)
        except Exception:
            log.exception("pin of %s in %s not kept", change.ts, change.channel)
            return "failed"

    async def _apply(self, change: PinChange, bot_user_id: str | None) -> PinOutcome:
        pin = change.stored_as()
        if not change.added:
            return "unpinned" if await clear_pin(self._db, pin) else "ignored"
        if flagged := await flag_pin(self._db, pin, room=self._room):
            await self._tell(change, flagged)
            return "pinned"
        if change.author is None or not await session_known(self._db, pin.session_id):
            return "ignored"
        text = await self._render(change.author, change.channel, bot_user_id)
        if retained := await retain_pin(self._db, pin, text, room=self._room):
            await self._tell(change, retained)
            return "retained"
        return "ignored"

    async def _tell(self, change: PinChange, pinned: Pinned) -> None:
        """Tell who pinned which pins are now only listed, privately; a failure is logged
        (the pin is kept all the same)."""
        if pinned.listed and self._on_listed is not None:
            self._on_listed(len(pinned.listed))
        if not pinned.listed or self._client is None or change.by is None:
            return
        text = cap_notice(pinned.listed, self._room)
        try:
            async with slack_deadline("chat.postEphemeral", self._budget):
                await self._client.chat_postEphemeral(
                    channel=change.channel, user=change.by, text=text, thread_ts=change.thread
                )
        except SlackError as exc:
            log.info("telling %s which pins are only listed failed (%s)", change.by, exc)

    async def _render(self, message: ThreadMessage, channel: str, bot_user_id: str | None) -> str:
        ids = sorted({message.user, *mentioned_user_ids(message.text)})
        try:
            async with asyncio.timeout(self._budget):
                names = await self._users.names(ids)
        except TimeoutError:
            names = {}  # the ids stand in, as in the gatekeeper
        return render_message(message, channel, names, bot_user_id=bot_user_id)


# How much of a message that fell out of memory the notice quotes.
QUOTE_CHARS = 80


def cap_notice(listed: Sequence[ListedPin], room: PinRoom) -> str:
    """What the person whose pin moved `listed` from shown whole to listed is told
    (mrkdwn: escaped, nothing in it can ping or link)."""
    which = "; ".join(_described(u) for u in listed)
    whole = "pin" if room.max_shown == 1 else f"{room.max_shown} pins"
    one = len(listed) == 1
    return (
        f"Pinned. I read the newest {whole} of a conversation whole, in about "
        f"{room.chars:,} characters, so {which} {'is' if one else 'are'} now shown to me "
        f"only by who wrote {'it' if one else 'them'} and how {'it starts' if one else 'they start'}: "
        "still pinned, in Slack and for me. Unpinning others makes room."
    )


def _described(message: ListedPin) -> str:
    """A message now only listed, as the notice names it: whose, and how it starts."""
    if message.role != "user":
        return f"my answer “{_opening(message.text)}”"
    try:
        turn = parse_turn(message.text)
    except TurnParseError:
        return f"“{_opening(message.text)}”"
    return f"{_opening(turn.name, 40)}’s message “{_opening(turn.body)}”"


def _opening(text: str, limit: int = QUOTE_CHARS) -> str:
    flat = " ".join(text.split())
    cut = flat if len(flat) <= limit else flat[: limit - 1] + "…"
    return escape_entities(neutralize_everywhere(cut))
