"""Conversation history in Postgres, as `agent.History`.

Messages are ordered by `anchor` (the seq of the user turn they answer) and then `seq`,
so an answer sits right after its question even when the next question arrived first.
The window is one index scan bounded by `max_messages`; the character budget is applied
to those rows, newest first. The cost of a round does not grow with the conversation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import asyncpg

from agent import Citation, StoredMessage, Task
from storage.database import Database
from storage.errors import translate_errors

_COLUMNS = "id, session_id, role, kind, text, citations"

_APPEND = f"""
WITH inserted AS (
    INSERT INTO messages (id, session_id, anchor, role, kind, text, citations)
    SELECT $1, $2, q.seq, $3, $4, $5, $7::jsonb FROM messages q WHERE q.id = $6
    ON CONFLICT (id) DO NOTHING
    RETURNING {_COLUMNS}
)
SELECT {_COLUMNS} FROM inserted
UNION ALL
SELECT {_COLUMNS} FROM messages WHERE id = $1
LIMIT 1
"""

_WINDOW = f"""
SELECT {_COLUMNS} FROM messages
WHERE session_id = $1 AND anchor <= (SELECT seq FROM messages WHERE id = $2)
ORDER BY anchor DESC, seq DESC
LIMIT $3
"""


def message_from_row(row: asyncpg.Record) -> StoredMessage:
    return StoredMessage(
        row["id"],
        row["session_id"],
        row["role"],
        row["kind"],
        row["text"],
        citations_from_json(row["citations"]),
    )


def citations_to_json(citations: Sequence[Citation]) -> str | None:
    """A reply's citations as stored (`messages.citations`); None when it has none."""
    if not citations:
        return None
    return json.dumps(
        [{"message": c.message_id} if c.message_id else {"url": c.url} for c in citations]
    )


def citations_from_json(stored: str | None) -> tuple[Citation, ...]:
    if not stored:
        return ()
    return tuple(
        Citation(message_id=item.get("message"), url=item.get("url")) for item in json.loads(stored)
    )


class PostgresHistory:
    """`agent.History` on Postgres."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("The conversation history could not be reached")
    async def get(self, message_id: str) -> StoredMessage | None:
        row = await self._db.pool.fetchrow(
            f"SELECT {_COLUMNS} FROM messages WHERE id = $1", message_id
        )
        return None if row is None else message_from_row(row)

    @translate_errors("The conversation history could not be reached")
    async def append(self, message: StoredMessage, *, answers: str) -> StoredMessage:
        m = message
        row = await self._db.pool.fetchrow(
            _APPEND,
            m.id,
            m.session_id,
            m.role,
            m.kind,
            m.text,
            answers,
            citations_to_json(m.citations),
        )
        if row is None:
            raise LookupError(
                f"cannot append {m.id}: the message it answers ({answers}) is not stored"
            )
        return message_from_row(row)

    @translate_errors("The conversation history could not be reached")
    async def window(
        self, task: Task, *, max_chars: int, max_messages: int
    ) -> Sequence[StoredMessage]:
        rows = await self._db.pool.fetch(
            _WINDOW, task.session_id, task.user_message_id, max_messages
        )
        return trim_to_budget([message_from_row(r) for r in rows], task.user_message_id, max_chars)


def trim_to_budget(
    newest_first: list[StoredMessage], keep_id: str, max_chars: int
) -> list[StoredMessage]:
    """Keep the newest messages within `max_chars` (and always `keep_id`); oldest first."""
    kept: list[StoredMessage] = []
    used = 0
    for message in newest_first:
        used += len(message.text)
        if used > max_chars and message.id != keep_id:
            if any(m.id == keep_id for m in kept):
                break
            continue
        kept.append(message)
    kept.reverse()
    return kept
