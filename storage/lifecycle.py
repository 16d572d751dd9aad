"""A stored turn changes after the fact: its author edited or deleted the Slack message.

An edit replaces the turn's text (re-rendered by the gateway exactly as a new turn is) and
keeps its row, so its place in the conversation and the reply that answered it stay, and
its pictures, and the host's notes on it (storage/notes.py: kept beside the text, never
in it, they need no re-appending). An
edit only moves forward: `edited_at` is the time of the edit as Slack gives it, and an
older edit delivered after a newer one changes nothing.

A deletion leaves a tombstone rather than deleting the row: the text is blanked, the
notes and the pictures deleted (in the same statement) and `deleted_at` set — the window
shows the runtime note `TOMBSTONE` (`agent.DELETED`) there, a note of the host's and not
words put in the person's turn — so the model never reads the words or sees the pictures
again, while the row keeps its seq — the anchor of
the reply that answered it, and the anchor a running task's window is read by
(`storage/history.py` reads the window up to the task's own turn). If the turn's task has
not started, it is cancelled in the same transaction through the operators' cancel path
(`storage/queue.py`, actor `slack:message_deleted`), so nothing is posted for it and the
thread's next message runs. A running task is left to finish: its model call may be under
way, and stopping it half-way helps no one.

Both are de-duplicated by the event id like admission is (`seen_events`): a redelivered
event changes nothing the second time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from agent import DELETED
from storage.database import Database
from storage.errors import translate_errors
from storage.queue import cancel_if_queued

TOMBSTONE = DELETED  # what the window shows where a deleted turn was (storage/history.py)
DELETION_ACTOR = "slack:message_deleted"

_SEEN = """
INSERT INTO seen_events (event_id) SELECT $1::text WHERE $1::text IS NOT NULL
ON CONFLICT DO NOTHING RETURNING true
"""

_REVISE = f"""
WITH ev AS ({_SEEN})
UPDATE messages SET text = $3, edited_at = $4
WHERE id = $2 AND deleted_at IS NULL AND (edited_at IS NULL OR edited_at < $4)
  AND ($1::text IS NULL OR EXISTS (SELECT 1 FROM ev))
RETURNING true
"""

# The pictures go in the same statement: a tombstone has none to show.
_BURY = """
WITH pictures AS (DELETE FROM message_attachments WHERE message_id = ANY($1::text[]))
UPDATE messages SET text = '', deleted_at = now(), citations = NULL, notes = NULL
WHERE id = ANY($1::text[]) AND deleted_at IS NULL
RETURNING id
"""


@dataclass(frozen=True, slots=True)
class Deleted:
    """What a deletion did: turns it blanked, and whether it cancelled their task."""

    turns: int
    cancelled: bool


@translate_errors("The turn could not be looked up")
async def stored_turn(db: Database, message_ids: Sequence[str]) -> str | None:
    """The id of the first of these turns that is stored and not deleted, if any."""
    found = await db.pool.fetchval(
        "SELECT id FROM messages WHERE id = ANY($1::text[]) AND role = 'user' "
        "AND deleted_at IS NULL ORDER BY array_position($1::text[], id) LIMIT 1",
        list(message_ids),
    )
    return None if found is None else str(found)


@translate_errors("The turn could not be looked up")
async def stored_turn_text(db: Database, message_id: str) -> str | None:
    """The stored text of a turn (as `stored_turn` found it)."""
    text = await db.pool.fetchval("SELECT text FROM messages WHERE id = $1", message_id)
    return None if text is None else str(text)


@translate_errors("The edit could not be stored")
async def revise_turn(
    db: Database, *, event_id: str | None, message_id: str, text: str, edited_at: datetime
) -> bool:
    """Replace the turn's text; False when the event was seen before, the turn is gone,
    or a newer edit is stored already."""
    return bool(await db.pool.fetchval(_REVISE, event_id, message_id, text, edited_at))


@translate_errors("The deletion could not be stored")
async def delete_turn(
    db: Database, *, event_id: str | None, message_ids: Sequence[str], task_id: str
) -> Deleted | None:
    """Blank the turns and cancel `task_id` if it has not started; None when the event was
    seen before."""
    async with db.pool.acquire() as conn, conn.transaction():
        if event_id is not None and not await conn.fetchval(_SEEN, event_id):
            return None
        buried = await conn.fetch(_BURY, list(message_ids))
        if not buried:
            return Deleted(0, cancelled=False)
        cancelled = await cancel_if_queued(
            conn, task_id, actor=DELETION_ACTOR, reason="its message was deleted in Slack"
        )
        return Deleted(len(buried), cancelled=cancelled is not None)
