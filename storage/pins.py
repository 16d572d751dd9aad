"""Pinned messages in Postgres: what `pin_added` and `pin_removed` change.

A pinned message stays in its session's window however long the thread grows (the window
reads the pinned rows with one extra bounded query, storage/history.py). A pin is found
among the rows we store — a person's turn (`task:{team}:{channel}:{ts}:user`), a
back-filled message (`slack:{team}:{channel}:{ts}`), or one of our replies and
acknowledgments (its outbox row holds the ts Slack gave it) — and flagged. A message we
never stored (someone's message the bot never saw, from before it joined the thread) is
stored as a retained turn of its session with provenance `pin`, placed before the
conversation the bot stored (anchor 0), its time in its turn tag; unpinning deletes it.

At most `max_pinned` messages per session are kept pinned: the newest pins win, an older
one beyond the cap is unpinned (and deleted, if it was only retained for its pin).
Everything here is idempotent, so a redelivered event changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from storage.database import Database
from storage.errors import translate_errors

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

_CAP = """
WITH beyond AS (
    SELECT id FROM messages WHERE session_id = $1 AND pinned
    ORDER BY pinned_at DESC, seq DESC OFFSET $2
),
dropped AS (
    DELETE FROM messages WHERE id IN (SELECT id FROM beyond) AND provenance = 'pin'
)
UPDATE messages SET pinned = false, pinned_at = NULL
WHERE id IN (SELECT id FROM beyond) AND provenance IS DISTINCT FROM 'pin'
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


@translate_errors("The pin could not be stored")
async def flag_pin(db: Database, pin: PinnedMessage, *, max_pinned: int) -> bool:
    """Flag the stored message `pin` names; False when none is stored."""
    async with db.pool.acquire() as conn, conn.transaction():
        found = await conn.fetch(_FLAG, list(pin.candidate_ids), pin.ts, pin.session_id)
        if found:
            await conn.execute(_CAP, pin.session_id, max_pinned)
    return bool(found)


@translate_errors("The pinned message could not be stored")
async def retain_pin(db: Database, pin: PinnedMessage, text: str, *, max_pinned: int) -> bool:
    """Store a message we never stored as a retained, pinned turn (already rendered);
    False when its session is unknown (a thread the bot takes no part in)."""
    async with db.pool.acquire() as conn, conn.transaction():
        stored = await conn.fetchval(_RETAIN, pin.retained_id, pin.session_id, text)
        if stored is not None:
            await conn.execute(_CAP, pin.session_id, max_pinned)
    return stored is not None


@translate_errors("The pin could not be removed")
async def clear_pin(db: Database, pin: PinnedMessage) -> bool:
    """Unpin the message (a retained one is deleted); False when nothing was pinned."""
    ids = [*pin.candidate_ids, pin.retained_id]
    return bool(await db.pool.fetch(_UNPIN, ids, pin.ts, pin.session_id))


@translate_errors("The session could not be read")
async def session_known(db: Database, session_id: str) -> bool:
    return bool(await db.pool.fetchval(_KNOWN, session_id))
