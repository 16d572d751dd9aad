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
pinned is flagged, so unpinning it lets the turn go, and the cap counts pins, not rows.

At most `max_pinned` messages per session are kept pinned: the newest pins win, an older
one beyond the cap is unpinned (and deleted, if it was only retained for its pin). The
pins that fell out come back from the call that pushed them out (`Pinned.unpinned`), so
the person who pinned can be told which (gateway/inbound/pins.py): a cap is never silent.
Everything here is idempotent, so a redelivered event changes nothing (and a second
delivery pushes nothing out: the first did).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from storage.database import Database
from storage.errors import translate_errors
from storage.migrations import Connection

_FLAG = """
WITH ours AS (
    SELECT split_part(id, '#', 1) AS id FROM outbox WHERE remote_ref = $2 AND remote_ref IS NOT NULL
)
UPDATE messages SET pinned = true, pinned_at = coalesce(pinned_at, now())
WHERE session_id = $3 AND (id = ANY($1::text[]) OR id IN (SELECT id FROM ours))
RETURNING id
"""

_RETAIN = """
INSERT INTO messages (id, session_id, anchor, role, kind, text, pinned, pinned_at, provenance)
SELECT $1, $2, 0, 'user', 'turn', $3, true, now(), 'pin'
WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $2)
ON CONFLICT (id) DO UPDATE SET pinned = true, pinned_at = coalesce(messages.pinned_at, now())
RETURNING id
"""

# The pins past the cap are unpinned (a retained one deleted) and come back, oldest first.
_CAP = """
WITH beyond AS (
    SELECT id, role, kind, text, pinned_at, seq FROM messages WHERE session_id = $1 AND pinned
    ORDER BY pinned_at DESC, seq DESC OFFSET $2
),
dropped AS (
    DELETE FROM messages WHERE id IN (SELECT id FROM beyond) AND provenance = 'pin'
),
cleared AS (
    UPDATE messages SET pinned = false, pinned_at = NULL
    WHERE id IN (SELECT id FROM beyond) AND provenance IS DISTINCT FROM 'pin'
)
SELECT id, role, kind, text, pinned_at FROM beyond ORDER BY pinned_at, seq
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
class Unpinned:
    """A pin the cap pushed out of the bot's memory (it stays pinned in Slack): the stored
    message, as the window would have shown it, and when it had been pinned."""

    id: str
    role: str
    kind: str
    text: str
    pinned_at: datetime


@dataclass(frozen=True, slots=True)
class Pinned:
    """What a pin did: whether it kept a message (`kept`), and which older pins it pushed
    past the cap, oldest first."""

    kept: bool
    unpinned: tuple[Unpinned, ...] = ()

    def __bool__(self) -> bool:
        return self.kept


@translate_errors("The pin could not be stored")
async def flag_pin(db: Database, pin: PinnedMessage, *, max_pinned: int) -> Pinned:
    """Flag the stored message `pin` names; not `kept` when none is stored."""
    async with db.pool.acquire() as conn, conn.transaction():
        found = await conn.fetch(_FLAG, list(pin.candidate_ids), pin.ts, pin.session_id)
        if not found:
            return Pinned(False)
        return Pinned(True, await _cap(conn, pin.session_id, max_pinned))


@translate_errors("The pinned message could not be stored")
async def retain_pin(db: Database, pin: PinnedMessage, text: str, *, max_pinned: int) -> Pinned:
    """Store a message we never stored as a retained, pinned turn (already rendered); not
    `kept` when its session is unknown (a thread the bot takes no part in)."""
    async with db.pool.acquire() as conn, conn.transaction():
        stored = await conn.fetchval(_RETAIN, pin.retained_id, pin.session_id, text)
        if stored is None:
            return Pinned(False)
        return Pinned(True, await _cap(conn, pin.session_id, max_pinned))


async def _cap(conn: Connection, session_id: str, max_pinned: int) -> tuple[Unpinned, ...]:
    return tuple(Unpinned(**row) for row in await conn.fetch(_CAP, session_id, max_pinned))


@translate_errors("The pin could not be removed")
async def clear_pin(db: Database, pin: PinnedMessage) -> bool:
    """Unpin the message (a retained one is deleted); False when nothing was pinned."""
    ids = [*pin.candidate_ids, pin.retained_id]
    return bool(await db.pool.fetch(_UNPIN, ids, pin.ts, pin.session_id))


@translate_errors("The session could not be read")
async def session_known(db: Database, session_id: str) -> bool:
    return bool(await db.pool.fetchval(_KNOWN, session_id))
