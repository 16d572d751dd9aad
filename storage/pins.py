"""Pinned messages in Postgres: what `pin_added` and `pin_removed` change.

A pinned message stays in its session's window however long the thread grows (the window
reads the pinned rows with one extra bounded query, storage/history.py). A pin is found
among the rows we store — a person's turn (`task:{team}:{channel}:{ts}:user`), a
back-filled message (`slack:{team}:{channel}:{ts}`), or one of our replies and
acknowledgments (its outbox row holds the ts Slack gave it) — and flagged. A message we
never stored (someone's message the bot never saw, from before it joined the thread) is
stored as a retained turn of its session with provenance `pin`, placed before the
conversation the bot stored (anchor 0), its time in its turn tag; unpinning deletes it.

A pin keeps its whole turn in view: the window shows, with each pinned message, the
messages of the same anchor (storage/history.py) — a pinned answer keeps the question it
answered, a pinned question its acknowledgments and answer. Only the message someone
pinned is flagged, so unpinning it lets the turn go.

No pin is dropped. The window shows pins whole while they fit its room (`PinRoom`: the
newest `max_shown` at most, within the history's characters; `shown_pins` decides,
for the window and for the pin alike), and lists the others to the model by who wrote
them and their first words. A pin that moves pins (itself included) from shown to listed
says which (`Pinned.listed`), so the person who pinned can be told (gateway/inbound/pins.py):
room running out is never silent. Everything here is idempotent, so a redelivered event
changes nothing (and a second delivery moves nothing: the first did).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from storage.database import Database
from storage.errors import translate_errors
from storage.migrations import Connection

# Each message flagged, and whether this flagged it (a redelivery finds it pinned).
_FLAG = """
WITH ours AS (
    SELECT split_part(id, '#', 1) AS id FROM outbox WHERE remote_ref = $2 AND remote_ref IS NOT NULL
),
hit AS (
    SELECT id, pinned FROM messages
    WHERE session_id = $3 AND (id = ANY($1::text[]) OR id IN (SELECT id FROM ours))
    FOR UPDATE
)
UPDATE messages m SET pinned = true, pinned_at = coalesce(m.pinned_at, now())
FROM hit WHERE m.id = hit.id
RETURNING m.id, NOT hit.pinned AS fresh
"""

_RETAIN = """
INSERT INTO messages (id, session_id, anchor, role, kind, text, pinned, pinned_at, provenance)
SELECT $1, $2, 0, 'user', 'turn', $3, true, now(), 'pin'
WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $2)
ON CONFLICT (id) DO UPDATE SET pinned = true, pinned_at = coalesce(messages.pinned_at, now())
RETURNING id, xmax = 0 AS fresh
"""

# The newest pins ($2 of them) with what their turns cost the window: the rows of their
# anchor (a retained pin, anchor 0, is alone), as storage/history.py shows them.
_NEWEST = """
SELECT p.id, p.role, p.kind, p.text, p.pinned_at, p.anchor,
       CASE WHEN p.anchor > 0
            THEN (SELECT sum(length(t.text)) FROM messages t
                  WHERE t.session_id = $1 AND t.anchor = p.anchor)
            ELSE length(p.text) END AS chars
FROM messages p WHERE p.session_id = $1 AND p.pinned
ORDER BY p.pinned_at DESC, p.seq DESC LIMIT $2
"""

_UNPIN = """
WITH ours AS (
    SELECT split_part(id, '#', 1) AS id FROM outbox WHERE remote_ref = $2 AND remote_ref IS NOT NULL
),
hit AS (
    SELECT id, provenance FROM messages
    WHERE session_id = $3 AND (id = ANY($1::text[]) OR id IN (SELECT id FROM ours))
),
dropped AS (
    DELETE FROM messages WHERE id IN (SELECT id FROM hit WHERE provenance = 'pin') RETURNING id
),
cleared AS (
    UPDATE messages SET pinned = false, pinned_at = NULL
    WHERE id IN (SELECT id FROM hit WHERE provenance IS DISTINCT FROM 'pin') RETURNING id
)
SELECT id FROM dropped UNION ALL SELECT id FROM cleared
"""

_KNOWN = "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = $1)"


@dataclass(frozen=True, slots=True)
class PinnedMessage:
    """Where a pinned message is: its session, its Slack ts, and the ids it may be stored
    under (a person's turn, a back-filled message)."""

    session_id: str
    ts: str
    candidate_ids: Sequence[str]
    retained_id: str  # the id it is stored under when retained for its pin


@dataclass(frozen=True, slots=True)
class PinRoom:
    """How many pins, and how many characters of their turns, the window shows whole."""

    max_shown: int
    chars: int

    @classmethod
    def of(cls, max_pinned: int, history_chars: int) -> PinRoom:
        """The room of a window of `history_chars` (THREADGATE_HISTORY_CHARS) showing at
        most `max_pinned` pins (THREADGATE_PINNED_MAX): pins are paid for first, as they
        always were, but never past the budget itself (the task's turn is shown anyway)."""
        return cls(max_pinned, history_chars)


@dataclass(frozen=True, slots=True)
class PinSize:
    """A pin as the room weighs it: its turn (`group`, the anchor) and that turn's size."""

    id: str
    group: int
    chars: int


def shown_pins(newest_first: Iterable[PinSize], room: PinRoom) -> frozenset[str]:
    """The pins the window shows whole: newest first, each while the room has space for
    its turn (a turn shown for a newer pin costs nothing again); the others are listed."""
    shown: set[str] = set()
    groups: set[int] = set()  # the anchors of the turns shown (a retained pin's is 0)
    turns = used = 0
    for pin in newest_first:
        if pin.group > 0 and pin.group in groups:
            shown.add(pin.id)
        elif turns < room.max_shown and used + pin.chars <= room.chars:
            shown.add(pin.id)
            groups.add(pin.group)
            turns, used = turns + 1, used + pin.chars
    return frozenset(shown)


@dataclass(frozen=True, slots=True)
class ListedPin:
    """A pin the window has no room to show whole, which the model now sees listed by its
    author and first words (it stays pinned, in Slack and for the bot): the stored message,
    and when it was pinned."""

    id: str
    role: str
    kind: str
    text: str
    pinned_at: datetime


@dataclass(frozen=True, slots=True)
class Pinned:
    """What a pin did: whether it kept a message (`kept`), and which pins — older ones,
    or this one — it moved from shown whole to listed, oldest first."""

    kept: bool
    listed: tuple[ListedPin, ...] = ()

    def __bool__(self) -> bool:
        return self.kept


@translate_errors("The pin could not be stored")
async def flag_pin(db: Database, pin: PinnedMessage, *, room: PinRoom) -> Pinned:
    """Flag the stored message `pin` names; not `kept` when none is stored."""
    async with db.pool.acquire() as conn, conn.transaction():
        found = await conn.fetch(_FLAG, list(pin.candidate_ids), pin.ts, pin.session_id)
        if not found:
            return Pinned(False)
        fresh = {r["id"] for r in found if r["fresh"]}
        return Pinned(True, await _listed(conn, pin.session_id, fresh, room))


@translate_errors("The pinned message could not be stored")
async def retain_pin(db: Database, pin: PinnedMessage, text: str, *, room: PinRoom) -> Pinned:
    """Store a message we never stored as a retained, pinned turn (already rendered); not
    `kept` when its session is unknown (a thread the bot takes no part in)."""
    async with db.pool.acquire() as conn, conn.transaction():
        stored = await conn.fetchrow(_RETAIN, pin.retained_id, pin.session_id, text)
        if stored is None:
            return Pinned(False)
        fresh = {pin.retained_id} if stored["fresh"] else set()
        return Pinned(True, await _listed(conn, pin.session_id, fresh, room))


async def _listed(
    conn: Connection, session_id: str, new: set[str], room: PinRoom
) -> tuple[ListedPin, ...]:
    """The pins that `new` moved from shown whole to listed (`new` itself among them when
    it does not fit), oldest first; only the newest `max_shown + 1` pins can move, and a
    pin found pinned already (a redelivery) moves none."""
    if not new:
        return ()
    rows = await conn.fetch(_NEWEST, session_id, room.max_shown + 1)
    sizes = [PinSize(r["id"], r["anchor"], r["chars"] or 0) for r in rows]
    before = shown_pins((p for p in sizes if p.id not in new), room)
    after = shown_pins(sizes, room)
    moved = (before - after) | (new - after)
    listed = [r for r in rows if r["id"] in moved]
    return tuple(
        ListedPin(r["id"], r["role"], r["kind"], r["text"], r["pinned_at"])
        for r in reversed(listed)
    )


@translate_errors("The pin could not be removed")
async def clear_pin(db: Database, pin: PinnedMessage) -> bool:
    """Unpin the message (a retained one is deleted); False when nothing was pinned."""
    ids = [*pin.candidate_ids, pin.retained_id]
    return bool(await db.pool.fetch(_UNPIN, ids, pin.ts, pin.session_id))


@translate_errors("The session could not be read")
async def session_known(db: Database, session_id: str) -> bool:
    return bool(await db.pool.fetchval(_KNOWN, session_id))
