"""Stored pictures' budgets: what a thread, and a workspace in a day, may keep.

Pictures are the bulk of the database (a message's text is kilobytes, a screenshot up to
3.75 MB), so two budgets bound them, in bytes, checked in admission's transaction:

- per thread (`THREADGATE_THREAD_PICTURE_BYTES`, default 50 MB): one conversation cannot
  make the bot store more, however long it runs;
- per workspace per UTC day (`THREADGATE_WORKSPACE_DAILY_PICTURE_BYTES`, default 500 MB):
  with retention set, the pictures a workspace can keep are at most the days kept times
  this, whoever sends them and in how many threads. Per workspace rather than per user:
  a per-user budget bounds nothing as people join, and one person's pace is bounded
  already (`THREADGATE_USER_MESSAGES_PER_HOUR`, files per message).

Bytes, not a count: storage is what a picture costs here (what a request carries is
bounded apart, `agent.MAX_IMAGES_PER_REQUEST`), and a count would treat a thumbnail like
a full-page screenshot. Both budgets count what was stored, and deleting a message gives
nothing back: posting and deleting cannot cycle round them, and the counters are written
in one place only.

Past a budget a picture is not stored, and its message says so: a note
(`agent.RuntimeNote`, source `attachment_not_kept`; the names in it are quoted and escaped
so that no name can close it) is kept beside the turn, never in its text
(`messages.notes`, storage/notes.py), and the model reads it after the turn; an edit of
the message replaces the text and keeps the note. The turn's own pictures
are weighed first, then the back-filled messages', newest first; each picture is kept
when it fits both budgets, so a small one may still fit after a large one did not.

The counters are the session's row (`sessions.picture_bytes`) and the workspace's day
(`picture_days`), both locked for the rest of the admission's transaction, so replicas
admitting pictures of one thread or workspace at once take turns and never both slip past.

PDFs kept for the models that read documents (agent/core/documents.py) are stored the
same way, in the same budgets, after the pictures of their message.

An attachment a provider refused is marked (`PostgresAttachmentRefusals`, the agent's
`AttachmentRefusals`): no later window carries it (storage/history.py), but its bytes stay
with its turn, as the person's words do — the history is what was said, and the mark is
what a provider made of it — and its turn gets a note (`attachment_refused`) saying it was
not shown and why, beside the budgets' note, so an edit keeps it too. The mark and the note
are one transaction, the rows locked: a replica marking it at the same time marks nothing
and adds no second note.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from agent import (
    AttachmentRefusals,
    Document,
    Image,
    Route,
    RuntimeNote,
    describe_attachment,
    not_shown_note,
)
from storage.database import Database
from storage.errors import translate_errors
from storage.migrations import Connection
from storage.notes import notes_json

log = logging.getLogger(__name__)

# Defaults (gateway/config/settings.py reads the settings); 0 means no budget.
DEFAULT_THREAD_PICTURE_BYTES = 50_000_000
DEFAULT_WORKSPACE_DAILY_PICTURE_BYTES = 500_000_000

_TODAY = "(now() AT TIME ZONE 'UTC')::date"

# $1 the session (its row exists: admission wrote it first), $2 the workspace or NULL.
# Both rows are locked until the admission commits. The session's with FOR NO KEY UPDATE:
# the admission's inserts hold a KEY SHARE lock on it (their foreign keys), which FOR
# UPDATE would wait for, in two admissions of one thread at once, each for the other's.
_STORED = f"""
WITH day AS (
    INSERT INTO picture_days (workspace, day) SELECT $2::text, {_TODAY} WHERE $2::text IS NOT NULL
    ON CONFLICT (workspace, day) DO UPDATE SET bytes = picture_days.bytes
    RETURNING bytes
)
SELECT (SELECT picture_bytes FROM sessions WHERE id = $1 FOR NO KEY UPDATE) AS thread,
       coalesce((SELECT bytes FROM day), 0) AS day
"""

# $3 the bytes this admission stored.
_COUNT = f"""
WITH thread AS (UPDATE sessions SET picture_bytes = picture_bytes + $3 WHERE id = $1)
UPDATE picture_days SET bytes = bytes + $3 WHERE workspace = $2 AND day = {_TODAY}
"""


@dataclass(frozen=True, slots=True)
class PictureBudgets:
    """Bytes of pictures one thread, and one workspace in a UTC day, may store; 0: no budget."""

    thread_bytes: int = DEFAULT_THREAD_PICTURE_BYTES
    workspace_daily_bytes: int = DEFAULT_WORKSPACE_DAILY_PICTURE_BYTES


NO_BUDGETS = PictureBudgets(0, 0)


@dataclass(frozen=True, slots=True)
class Kept:
    """A message's pictures within the budgets, and what its text says of the others."""

    images: tuple[Image | Document, ...]
    note: RuntimeNote | None = None  # kept beside the message's text; None: all were kept
    left_out: int = 0


class PictureRoom:
    """What is left of the budgets in one admission: pictures are weighed one at a time."""

    def __init__(self, budgets: PictureBudgets, *, thread_used: int, day_used: int) -> None:
        self._budgets = budgets
        self._thread_left = budgets.thread_bytes - thread_used
        self._day_left = budgets.workspace_daily_bytes - day_used

    def keep(self, images: Sequence[Image | Document]) -> Kept:
        """Each attachment that fits what is left (and takes its room); the others named."""
        kept: list[Image | Document] = []
        refused: list[tuple[Image | Document, str]] = []
        for image in images:
            reason = self._refusal(len(image.data))
            if reason is None:
                kept.append(image)
                self._thread_left -= len(image.data)
                self._day_left -= len(image.data)
            else:
                refused.append((image, reason))
        return Kept(tuple(kept), not_kept_note(refused), len(refused))

    def _refusal(self, size: int) -> str | None:
        if self._budgets.thread_bytes and size > self._thread_left:
            return (
                f"this thread has stored its limit of {self._budgets.thread_bytes:,} bytes "
                "of pictures"
            )
        if self._budgets.workspace_daily_bytes and size > self._day_left:
            return (
                f"this workspace has stored today's limit of "
                f"{self._budgets.workspace_daily_bytes:,} bytes of pictures "
                "(pictures sent after midnight UTC are kept)"
            )
        return None


def not_kept_note(refused: Sequence[tuple[Image | Document, str]]) -> RuntimeNote | None:
    """The note kept with a message for pictures (and PDFs) not kept, with the reasons."""
    if not refused:
        return None
    noun = "picture" if all(isinstance(i, Image) for i, _ in refused) else "attachment"
    which = f"a {noun}" if len(refused) == 1 else f"{len(refused)} {noun}s"
    its = "it" if len(refused) == 1 else "them"
    each = "; ".join(
        f"{_quoted(image.name)} ({len(image.data):,} bytes): {reason}" for image, reason in refused
    )
    return RuntimeNote(
        "attachment_not_kept",
        f"Not kept, so you cannot see {its}: {which} of this message, {each}.",
    )


def _quoted(name: str) -> str:
    """The name as a JSON string in ASCII, angle brackets escaped: it cannot end the note."""
    return json.dumps(name, ensure_ascii=True).replace("<", "\\u003c").replace(">", "\\u003e")


async def keep_pictures(
    conn: Connection,
    budgets: PictureBudgets,
    *,
    session_id: str,
    workspace: str | None,
    messages: Sequence[Sequence[Image | Document]],
) -> list[Kept]:
    """Weigh the messages' pictures, in the order given, against what the thread and the
    workspace's day have stored; lock both counters until the transaction ends (no
    round trip when there is no picture)."""
    if not any(messages):
        return [Kept(tuple(images)) for images in messages]
    row = await conn.fetchrow(_STORED, session_id, workspace)
    assert row is not None
    room = PictureRoom(budgets, thread_used=row["thread"] or 0, day_used=row["day"])
    kept = [room.keep(images) for images in messages]
    if left_out := sum(k.left_out for k in kept):
        log.info("%d pictures not kept: over a picture budget", left_out)
    return kept


async def count_pictures(
    conn: Connection, *, session_id: str, workspace: str | None, stored_bytes: int
) -> None:
    """Add what the admission stored to the thread's and the workspace's day's counters."""
    if stored_bytes:
        await conn.execute(_COUNT, session_id, workspace, stored_bytes)


# $1 message ids, $2 ordinals (pairs), $3 the route. The rows not yet marked are marked
# (their bytes kept); each one's turn gets its note, in the same transaction.
_REFUSE = """
WITH old AS (
    SELECT a.message_id, a.ordinal, a.name, a.media_type, octet_length(a.data) AS size
    FROM unnest($1::text[], $2::int[]) AS k (message_id, ordinal)
    JOIN message_attachments a USING (message_id, ordinal)
    WHERE a.refused_at IS NULL
    FOR UPDATE OF a
), marked AS (
    UPDATE message_attachments a SET refused_at = now(), refused_by = $3
    FROM old WHERE a.message_id = old.message_id AND a.ordinal = old.ordinal
    RETURNING a.message_id
)
SELECT old.message_id, old.ordinal, old.name, old.media_type, old.size FROM old
ORDER BY old.message_id, old.ordinal
"""

_NOTE = """
UPDATE messages SET notes = coalesce(notes, '[]'::jsonb) || $2::jsonb
WHERE id = $1 AND deleted_at IS NULL
"""


class PostgresAttachmentRefusals(AttachmentRefusals):
    """`agent.AttachmentRefusals` on Postgres (module docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("An attachment the provider refused could not be marked")
    async def refuse(self, keys: Sequence[str], *, route: Route, reason: str) -> None:
        pairs = [p for p in map(_parse_key, keys) if p is not None]
        if not pairs:
            return
        async with self._db.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                _REFUSE,
                [m for m, _ in pairs],
                [o for _, o in pairs],
                f"{route.provider}:{route.model}",
            )
            notes: dict[str, list[str]] = {}
            for row in rows:
                kind = "document" if row["media_type"] == "application/pdf" else "picture"
                notes.setdefault(row["message_id"], []).append(
                    describe_attachment(kind, row["name"], row["size"])
                )
            for message_id, described in notes.items():
                why = f"the provider refused {'it' if len(described) == 1 else 'them'}: {reason}"
                note = not_shown_note(described, why, "attachment_refused")
                await conn.execute(_NOTE, message_id, notes_json([note] if note else []))
        log.info("%d attachment(s) refused by %s:%s marked", len(rows), route.provider, route.model)


def _parse_key(key: str) -> tuple[str, int] | None:
    """The message id and ordinal of an attachment key; None for one of another shape."""
    message_id, _, ordinal = key.rpartition("#")
    return (message_id, int(ordinal)) if message_id and ordinal.isdigit() else None
