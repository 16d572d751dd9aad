"""Conversation history in Postgres, as `agent.History`.

Messages are ordered by `anchor` (the seq of the user turn they answer) and then `seq`,
so an answer sits right after its question even when the next question arrived first.
The window is one index scan bounded by `max_messages`; the character budget is applied
to those rows, newest first. The cost of a round does not grow with the conversation.
A task's reply is stored only under its lease (`append(lease=…)`), as its posts are.

What the session remembers beyond that comes with it, in the same statement: its pinned
messages, each with the rest of its turn — the messages of the same anchor: a pinned
answer keeps its question, a pinned question its answer — shown wherever they are and
marked, and the latest summary of its older turns (storage/summaries.py), shown first;
the recent messages are then those after what the summary covers. No pin is left out:
the newest `max_pinned` are read whole and shown while they fit the pins' room (the
budget, `storage.pins.PinRoom`, decided by `shown_pins` as when the pin was made), and the
others — up to `MAX_LISTED_PINS` more, their first `LISTED_CHARS` read — come as
`Window.pins`, which the prompt lists by author and first words (and says when there are
more still). Shown pins, the listing and the summary are paid for first out of the
character budget; the task's turn is always shown. The window says whether the budget
left anything out (`Window.complete`): when it did not, compaction has nothing to read.

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
    ListedPins,
    StoredMessage,
    Task,
    Window,
    attachment_key,
)
from storage.database import Database
from storage.errors import translate_errors
from storage.memory import slot_name
from storage.notes import notes_from_json
from storage.outbox import Superseded
from storage.pins import PinRoom, PinSize, shown_pins

_COLUMNS = "id, session_id, role, kind, text, pinned, citations, notes, deleted_at"

# A deleted turn's pictures were deleted with it (storage/lifecycle.py); never shown anyway.
_HAS_IMAGES = """(role = 'user' AND deleted_at IS NULL AND EXISTS (
    SELECT 1 FROM message_attachments a WHERE a.message_id = m.id)) AS has_images"""

# The answer's origin is stored with it ($8-$12; storage/memory.py `stamp`), in the same
# statement: only when this call stored it, as a stamp of a stored answer would be.
#
# A task's reply is fenced by its lease ($13 the task, $14 the attempt, $15 this process's
# lease owner; $13 NULL: not fenced), as the outbox fences its posts (storage/outbox.py):
# under `collect` a later attempt may cover messages this one never saw
# (storage/thread_queue.py), and finds a stored reply to deliver as the answer to all of
# them. So an attempt that lost its lease stores nothing, and learns it (`fenced`) whether
# a reply is stored or not. FOR SHARE keeps a claim of the task (FOR UPDATE) from slipping
# in before the insert commits. One row always: the stored message's columns are NULL
# when its question is not stored (or the fence refused the insert and none was stored).
_APPEND = f"""
WITH fence AS (
    SELECT true FROM tasks
    WHERE id = $13 AND attempts = $14 AND state = 'running' AND lease_owner = $15
    FOR SHARE
), inserted AS (
    INSERT INTO messages (id, session_id, anchor, role, kind, text, citations,
                          prompt_epoch, route_provider, route_model, route_slot, route_index)
    SELECT $1, $2, q.seq, $3, $4, $5, $7::jsonb, $8, $9, $10, $11, $12
    FROM messages q WHERE q.id = $6 AND ($13::text IS NULL OR EXISTS (SELECT 1 FROM fence))
    ON CONFLICT (id) DO NOTHING
    RETURNING {_COLUMNS}
), stored AS (
    SELECT {_COLUMNS} FROM inserted
    UNION ALL
    SELECT {_COLUMNS} FROM messages WHERE id = $1
    LIMIT 1
)
SELECT ($13::text IS NULL OR EXISTS (SELECT 1 FROM fence)) AS fenced, s.*
FROM (VALUES (true)) AS one (x) LEFT JOIN stored s ON true
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
SELECT a.message_id, a.ordinal, a.name, a.media_type, a.data, a.pages, a.in_turn,
       a.page_texts
FROM ranked r JOIN message_attachments a USING (message_id, ordinal)
WHERE r.n <= CASE WHEN r.document THEN $3::int ELSE $2::int END
ORDER BY r.position DESC, a.ordinal
"""

# The window in one statement: the pinned messages (the newest $3 pins) with their turns,
# the next $5 pins (and one more, to know of more) by their first $6 characters, the
# latest summary before the task's turn, and the recent messages after what that summary
# covers (one index scan bounded by $4), each row marked with its `part`. A pin's turn is
# its anchor's rows (a retained pin, anchor 0, is alone), all marked pinned, `pinned_at`
# on the pinned ones; each is an index lookup (by anchor, by id), whatever the session's
# length, and the pins are read newest first along `messages_pinned`, as far as needed.
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
    SELECT id, anchor, row_number() OVER (ORDER BY pinned_at DESC) AS rank
    FROM (SELECT id, anchor, pinned_at FROM messages
          WHERE session_id = $1 AND pinned AND anchor <= (SELECT seq FROM target)
          ORDER BY pinned_at DESC LIMIT $3::int + $5::int + 1) newest
)
(SELECT 'pinned' AS part, id, session_id, role, kind, text, true AS pinned, citations,
        notes, deleted_at, pinned_at, anchor, seq, {_HAS_IMAGES}
 FROM messages m
 WHERE session_id = $1
   AND anchor IN (SELECT anchor FROM pins WHERE anchor > 0 AND rank <= $3::int))
UNION ALL
(SELECT 'pinned', id, session_id, role, kind, text, true, citations, notes, deleted_at,
        pinned_at, anchor, seq, {_HAS_IMAGES}
 FROM messages m WHERE id IN (SELECT id FROM pins WHERE anchor = 0 AND rank <= $3::int))
UNION ALL
(SELECT 'listed', id, session_id, role, kind, left(text, $6::int), true, NULL::jsonb, notes,
        deleted_at, pinned_at, anchor, seq, false
 FROM messages m WHERE id IN (SELECT id FROM pins WHERE rank > $3::int))
UNION ALL
(SELECT 'summary', 'summary:' || $1 || ':' || covers_to_seq, $1, 'user', 'summary', text,
        false, NULL::jsonb, NULL::jsonb, NULL::timestamptz, NULL::timestamptz, covers_to_seq,
        0, false
 FROM summary)
UNION ALL
(SELECT 'recent', {_COLUMNS}, NULL::timestamptz, anchor, seq, {_HAS_IMAGES} FROM messages m
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


def document_from_row(row: asyncpg.Record, key: str) -> Document:
    """A stored PDF, with the block of its turn that carries its text and its pages' text."""
    pages = row["page_texts"]
    page_texts = json.loads(pages) if isinstance(pages, str) else pages or ()
    return Document(
        bytes(row["data"]),
        row["name"],
        row["pages"],
        key=key,
        in_turn=row["in_turn"] or "",
        page_texts=tuple(str(p) for p in page_texts),
    )


def citations_to_json(citations: Sequence[Citation]) -> str | None:
    """A reply's citations as stored (`messages.citations`); None when it has none."""
    if not citations:
        return None
    return json.dumps([_citation_json(c) for c in citations])


def _citation_json(c: Citation) -> dict[str, object]:
    if c.url is not None:
        return {"url": c.url}
    passage = {
        "document": c.document,
        "page": c.page,
        "end_page": c.end_page,
        "cited_text": c.cited_text,
        "quote": c.quote,
        "quote_found": c.quote_found,
    }
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
            end_page=item.get("end_page"),
            cited_text=item.get("cited_text"),
            quote_found=item.get("quote_found"),
        )
        for item in json.loads(stored)
    )


# Pinned messages shown whole per thread, room allowing (THREADGATE_PINNED_MAX); the
# others are listed, up to MAX_LISTED_PINS of them by their first LISTED_CHARS.
DEFAULT_PINNED_MAX = 10
MAX_LISTED_PINS = 20
LISTED_CHARS = 600  # the opening tag (name, ids, times) and the first words


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
        self,
        message: StoredMessage,
        *,
        answers: str,
        origin: AnswerOrigin | None = None,
        lease: Task | None = None,
    ) -> StoredMessage:
        m = message
        route = origin.route if origin else None
        # Only a fenced append asks for the owner: a process that runs no task never does.
        owner = await self._db.lease_owner() if lease is not None else None
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
            lease.id if lease is not None else None,
            lease.attempts if lease is not None else None,
            owner,
        )
        assert row is not None  # one row always
        if not row["fenced"]:
            assert lease is not None
            raise Superseded(
                f"attempt {lease.attempts} of task {lease.id} is no longer its lease:"
                f" {m.id} is not stored"
            )
        if row["id"] is None:
            raise LookupError(
                f"cannot append {m.id}: the message it answers ({answers}) is not stored"
            )
        return message_from_row(row)

    @translate_errors("The conversation history could not be reached")
    async def window(self, task: Task, *, max_chars: int, max_messages: int) -> Window:
        rows = await self._db.pool.fetch(
            _WINDOW,
            task.session_id,
            task.newest_turn_id,
            self._max_pinned,
            max_messages,
            MAX_LISTED_PINS,
            LISTED_CHARS,
        )
        summary = next((r for r in rows if r["part"] == "summary"), None)
        pins = pinned_view(
            [r for r in rows if r["part"] == "pinned"],
            [r for r in rows if r["part"] == "listed"],
            PinRoom.of(self._max_pinned, max_chars),
        )
        recent = [r for r in rows if r["part"] == "recent"]
        window = remembered_window(summary, pins, recent, task.newest_turn_id, max_chars)
        # Nothing was left out when the scan ended before its limit and the budget kept
        # every recent message (a pinned one is shown anyway).
        shown = {m.id for m in window}
        complete = len(recent) < max_messages and all(r["id"] in shown for r in recent)
        messages = await self._with_attachments(window, {r["id"] for r in rows if r["has_images"]})
        return Window(tuple(messages), complete, pins.listed(shown))

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
                documents[row["message_id"]].append(document_from_row(row, key))
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


@dataclasses.dataclass(frozen=True, slots=True)
class PinnedView:
    """The window's pins: the rows shown whole, and the pins listed, newest first."""

    shown: list[asyncpg.Record]
    listing: list[asyncpg.Record]

    @property
    def chars(self) -> int:
        """What they cost the budget: the turns shown, and the listing's words."""
        return sum(len(r["text"]) for r in self.shown) + sum(
            min(len(r["text"]), LISTED_CHARS // 3) for r in self.listing[:MAX_LISTED_PINS]
        )

    def listed(self, shown: set[str]) -> ListedPins:
        """The pins to list: those not shown anyway (a recent one is)."""
        rows = [r for r in self.listing if r["id"] not in shown]
        messages = tuple(
            dataclasses.replace(message_from_row(r), text=r["text"][:LISTED_CHARS])
            for r in rows[:MAX_LISTED_PINS]
        )
        return ListedPins(messages, more=len(rows) > MAX_LISTED_PINS)


def pinned_view(
    pinned: list[asyncpg.Record], listed: list[asyncpg.Record], room: PinRoom
) -> PinnedView:
    """Which of the newest pins are shown whole, by `shown_pins` (storage/pins.py), and
    which listed with those read for the list only."""
    turns: defaultdict[object, list[asyncpg.Record]] = defaultdict(list)
    for row in pinned:
        turns[_turn_of(row)].append(row)
    pins = sorted((r for r in pinned if r["pinned_at"] is not None), key=lambda r: r["pinned_at"])
    pins.reverse()
    sizes = [
        PinSize(r["id"], r["anchor"], sum(len(t["text"]) for t in turns[_turn_of(r)])) for r in pins
    ]
    whole = shown_pins(sizes, room)
    shown_turns = {_turn_of(r) for r in pins if r["id"] in whole}
    shown = [row for turn in shown_turns for row in turns[turn]]
    shown_ids = {r["id"] for r in shown}
    listing = [r for r in pins if r["id"] not in whole]
    listing += sorted(
        (r for r in listed if r["id"] not in shown_ids), key=lambda r: r["pinned_at"], reverse=True
    )
    return PinnedView(shown, [r for r in listing if r["id"] not in shown_ids])


def _turn_of(row: asyncpg.Record) -> object:
    """The turn a pinned row belongs to: its anchor, or itself for a retained pin."""
    return row["anchor"] if row["anchor"] > 0 else row["id"]


def remembered_window(
    summary: asyncpg.Record | None,
    pins: PinnedView,
    newest_first: list[asyncpg.Record],
    keep_id: str,
    max_chars: int,
) -> list[StoredMessage]:
    """The summary, then the pinned and the recent messages in their order (anchor, seq);
    the recent ones within what the summary and the pins left of the budget."""
    pinned = pins.shown
    pinned_ids = {r["id"] for r in pinned}
    spent = pins.chars + (len(summary["text"]) if summary else 0)
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
