"""Conversation history in Postgres, as `agent.History`.

Messages are ordered by `anchor` (the seq of the user turn they answer) and then `seq`,
so an answer sits right after its question even when the next question arrived first.
The window is one index scan bounded by `max_messages`; the character budget is applied
to those rows, newest first. The cost of a round does not grow with the conversation.

What the session remembers beyond that comes with it, in the same statement: its pinned
messages (the newest `max_pinned` pins, storage/pins.py), each with the rest of its turn —
the messages of the same anchor: a pinned answer keeps its question, a pinned question
its answer — shown wherever they are and marked, and
the latest summary of its older turns (storage/summaries.py), shown first; the recent
messages are then those after what the summary covers. Pinned messages and the summary
are paid for first out of the character budget; the task's turn is always shown. The
window says whether the budget left anything out (`Window.complete`): when it did not,
compaction has nothing to read.

Pictures and PDFs shown with user turns (`message_attachments`) come from one more query,
made only when a kept turn has any (the window's rows say so), bounded like the prompt
that uses them: the newest `MAX_IMAGES_PER_REQUEST` pictures and `MAX_DOCUMENTS_PER_REQUEST`
documents of the messages the window kept (which are chosen first, without their bytes,
so only those are read). A turn whose attachments are older than those carries none
here; its text still names them. A deleted turn carries none, and neither does an
attachment a provider refused (storage/pictures.py): its turn says so instead. Each
carries its key (`message id#ordinal`), by which a refusal names it.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Sequence

import asyncpg

from agent import (
    DELETED,
    MAX_DOCUMENTS_PER_REQUEST,
    MAX_IMAGES_PER_REQUEST,
    PDF,
    AnswerOrigin,
    Citation,
    Document,
    Image,
    StoredMessage,
    Task,
    Window,
    attachment_key,
)
from storage.database import Database
from storage.errors import translate_errors
from storage.memory import slot_name
from storage.notes import notes_from_json

_COLUMNS = "id, session_id, role, kind, text, pinned, citations, notes, deleted_at"

# A deleted turn's pictures were deleted with it (storage/lifecycle.py); never shown anyway.
_HAS_IMAGES = """(role = 'user' AND deleted_at IS NULL AND EXISTS (
    SELECT 1 FROM message_attachments a WHERE a.message_id = m.id)) AS has_images"""

# The answer's origin is stored with it ($8-$12; storage/memory.py `stamp`), in the same
# statement: only when this call stored it, as a stamp of a stored answer would be.
_APPEND = f"""
WITH inserted AS (
    INSERT INTO messages (id, session_id, anchor, role, kind, text, citations,
                          prompt_epoch, route_provider, route_model, route_slot, route_index)
    SELECT $1, $2, q.seq, $3, $4, $5, $7::jsonb, $8, $9, $10, $11, $12
    FROM messages q WHERE q.id = $6
    ON CONFLICT (id) DO NOTHING
    RETURNING {_COLUMNS}
)
SELECT {_COLUMNS} FROM inserted
UNION ALL
SELECT {_COLUMNS} FROM messages WHERE id = $1
LIMIT 1
"""

# $1 the window's message ids, oldest first; $2 how many pictures, $3 how many documents
# at most: the newest of each, chosen without reading any bytes, then only theirs read.
_ATTACHMENTS = f"""
WITH ranked AS (
    SELECT a.message_id, a.ordinal, w.position, a.media_type = '{PDF}' AS document,
           row_number() OVER (PARTITION BY a.media_type = '{PDF}'
                              ORDER BY w.position DESC, a.ordinal) AS n
    FROM unnest($1::text[]) WITH ORDINALITY AS w (id, position)
    JOIN message_attachments a ON a.message_id = w.id
    WHERE a.refused_at IS NULL
)
SELECT a.message_id, a.ordinal, a.name, a.media_type, a.data, a.pages
FROM ranked r JOIN message_attachments a USING (message_id, ordinal)
WHERE r.n <= CASE WHEN r.document THEN $3::int ELSE $2::int END
ORDER BY r.position DESC, a.ordinal
"""

# The window in one statement: the pinned messages (newest pins, bounded) with their
# turns, the latest summary before the task's turn, and the recent messages after what
# that summary covers (one index scan bounded by $4), each row marked with its `part`.
# A pin's turn is its anchor's rows (a retained pin, anchor 0, is alone), all marked
# pinned; each is an index lookup (by anchor, by id), whatever the session's length.
# `has_images` says whether a user turn has pictures, so that the pictures are read only
# when one has.
_WINDOW = f"""
WITH target AS (SELECT seq FROM messages WHERE id = $2),
summary AS (
    SELECT covers_to_seq, text FROM summaries
    WHERE session_id = $1 AND covers_to_seq < (SELECT seq FROM target)
    ORDER BY covers_to_seq DESC LIMIT 1
),
pins AS (
    SELECT id, anchor FROM messages
    WHERE session_id = $1 AND pinned AND anchor <= (SELECT seq FROM target)
    ORDER BY pinned_at DESC LIMIT $3
)
(SELECT 'pinned' AS part, id, session_id, role, kind, text, true AS pinned, citations,
        notes, deleted_at, anchor, seq, {_HAS_IMAGES}
 FROM messages m
 WHERE session_id = $1 AND anchor IN (SELECT anchor FROM pins WHERE anchor > 0))
UNION ALL
(SELECT 'pinned', id, session_id, role, kind, text, true, citations, notes, deleted_at, anchor,
        seq, {_HAS_IMAGES}
 FROM messages m WHERE id IN (SELECT id FROM pins WHERE anchor = 0))
UNION ALL
(SELECT 'summary', 'summary:' || $1 || ':' || covers_to_seq, $1, 'user', 'summary', text,
        false, NULL::jsonb, NULL::jsonb, NULL::timestamptz, covers_to_seq, 0, false
 FROM summary)
UNION ALL
(SELECT 'recent', {_COLUMNS}, anchor, seq, {_HAS_IMAGES} FROM messages m
 WHERE session_id = $1 AND anchor <= (SELECT seq FROM target)
   AND anchor > coalesce((SELECT covers_to_seq FROM summary), 0)
 ORDER BY anchor DESC, seq DESC
 LIMIT $4)
"""


def message_from_row(row: asyncpg.Record) -> StoredMessage:
    """A stored message with the host's notes on it (storage/notes.py): a deleted turn's
    is the tombstone, derived from `deleted_at` (a query without those columns: none)."""
    notes = notes_from_json(row.get("notes"))
    if row.get("deleted_at") is not None:
        notes = (DELETED, *notes)
    return StoredMessage(
        row["id"],
        row["session_id"],
        row["role"],
        row["kind"],
        row["text"],
        pinned=row["pinned"],
        citations=citations_from_json(row["citations"]),
        notes=notes,
    )


def citations_to_json(citations: Sequence[Citation]) -> str | None:
    """A reply's citations as stored (`messages.citations`); None when it has none."""
    if not citations:
        return None
    return json.dumps([_citation_json(c) for c in citations])


def _citation_json(c: Citation) -> dict[str, object]:
    if c.url is not None:
        return {"url": c.url}
    passage = {"document": c.document, "page": c.page, "quote": c.quote}
    return {"message": c.message_id} | {k: v for k, v in passage.items() if v is not None}


def citations_from_json(stored: str | None) -> tuple[Citation, ...]:
    if not stored:
        return ()
    return tuple(
        Citation(
            message_id=item.get("message"),
            url=item.get("url"),
            document=item.get("document"),
            page=item.get("page"),
            quote=item.get("quote"),
        )
        for item in json.loads(stored)
    )


# Pinned messages kept in view per thread; the newest pins win (THREADGATE_PINNED_MAX).
DEFAULT_PINNED_MAX = 10


class PostgresHistory:
    """`agent.History` on Postgres."""

    def __init__(self, db: Database, *, max_pinned: int = DEFAULT_PINNED_MAX) -> None:
        self._db = db
        self._max_pinned = max_pinned

    @translate_errors("The conversation history could not be reached")
    async def get(self, message_id: str) -> StoredMessage | None:
        row = await self._db.pool.fetchrow(
            f"SELECT {_COLUMNS} FROM messages WHERE id = $1", message_id
        )
        return None if row is None else message_from_row(row)

    @translate_errors("The conversation history could not be reached")
    async def append(
        self, message: StoredMessage, *, answers: str, origin: AnswerOrigin | None = None
    ) -> StoredMessage:
        m = message
        route = origin.route if origin else None
        row = await self._db.pool.fetchrow(
            _APPEND,
            m.id,
            m.session_id,
            m.role,
            m.kind,
            m.text,
            answers,
            citations_to_json(m.citations),
            origin.prompt_epoch if origin else None,
            route.provider if route else None,
            route.model if route else None,
            slot_name(route.slot) if route else None,
            route.slot if route else None,
        )
        if row is None:
            raise LookupError(
                f"cannot append {m.id}: the message it answers ({answers}) is not stored"
            )
        return message_from_row(row)

    @translate_errors("The conversation history could not be reached")
    async def window(self, task: Task, *, max_chars: int, max_messages: int) -> Window:
        rows = await self._db.pool.fetch(
            _WINDOW, task.session_id, task.user_message_id, self._max_pinned, max_messages
        )
        summary = next((r for r in rows if r["part"] == "summary"), None)
        pinned = [r for r in rows if r["part"] == "pinned"]
        recent = [r for r in rows if r["part"] == "recent"]
        window = remembered_window(summary, pinned, recent, task.user_message_id, max_chars)
        # Nothing was left out when the scan ended before its limit and the budget kept
        # every recent message (a pinned one is shown anyway).
        shown = {m.id for m in window}
        complete = len(recent) < max_messages and all(r["id"] in shown for r in recent)
        messages = await self._with_attachments(window, {r["id"] for r in rows if r["has_images"]})
        return Window(tuple(messages), complete)

    async def _with_attachments(
        self, window: list[StoredMessage], with_attachments: set[str]
    ) -> list[StoredMessage]:
        """The window with the newest pictures and documents of its user turns attached
        (those in `with_attachments` have some: no read when none has)."""
        turns = [m.id for m in window if m.id in with_attachments]
        if not turns:
            return window
        rows = await self._db.pool.fetch(
            _ATTACHMENTS, turns, MAX_IMAGES_PER_REQUEST, MAX_DOCUMENTS_PER_REQUEST
        )
        images: defaultdict[str, list[Image]] = defaultdict(list)
        documents: defaultdict[str, list[Document]] = defaultdict(list)
        for row in rows:  # each message's attachments in their order
            key = attachment_key(row["message_id"], row["ordinal"])
            if row["media_type"] == PDF:
                documents[row["message_id"]].append(
                    Document(bytes(row["data"]), row["name"], row["pages"], key=key)
                )
            else:
                images[row["message_id"]].append(
                    Image(row["media_type"], bytes(row["data"]), row["name"], key=key)
                )
        return [
            dataclasses.replace(m, images=tuple(images[m.id]), documents=tuple(documents[m.id]))
            if m.id in images or m.id in documents
            else m
            for m in window
        ]


def remembered_window(
    summary: asyncpg.Record | None,
    pinned: list[asyncpg.Record],
    newest_first: list[asyncpg.Record],
    keep_id: str,
    max_chars: int,
) -> list[StoredMessage]:
    """The summary, then the pinned and the recent messages in their order (anchor, seq);
    the recent ones within what the summary and the pins left of the budget."""
    pinned_ids = {r["id"] for r in pinned}
    spent = sum(len(r["text"]) for r in pinned) + (len(summary["text"]) if summary else 0)
    recent = [r for r in newest_first if r["id"] not in pinned_ids]
    kept = {
        m.id
        for m in trim_to_budget(list(map(message_from_row, recent)), keep_id, max_chars - spent)
    }
    shown = sorted(
        [*pinned, *(r for r in recent if r["id"] in kept)], key=lambda r: (r["anchor"], r["seq"])
    )
    head = [message_from_row(summary)] if summary else []
    return head + [message_from_row(r) for r in shown]


def trim_to_budget(
    newest_first: list[StoredMessage], keep_id: str, max_chars: int
) -> list[StoredMessage]:
    """Keep the newest messages within `max_chars` (and always `keep_id`); oldest first."""
    kept: list[StoredMessage] = []
    used = 0
    for message in newest_first:
        used += len(message.text) + sum(len(note.text) for note in message.notes)
        if used > max_chars and message.id != keep_id:
            if any(m.id == keep_id for m in kept):
                break
            continue
        kept.append(message)
    kept.reverse()
    return kept
