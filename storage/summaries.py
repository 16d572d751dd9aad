"""Summaries of what outgrew a session's window, in Postgres, as `agent.SummaryStore`.

The window (storage/history.py) shows the latest summary first, then the messages after
what it covers. `overflow` reads what the window no longer shows — the messages between
the latest summary and the oldest message the window shows — with one bounded range scan
of the window index, whole turns (an anchor's messages) only, so a summary never covers
half of a question and its answer. A pinned turn is not summarized: the window shows it
whole (storage/pins.py). The summarizer gets the previous summary with them,
and the new summary covers both: summaries roll forward, and only the latest is read.

Storing a summary written under another prompt than the session's begins the session's
next epoch (`compaction`, storage/memory.py) in the same transaction: the summary was
written for this deployment's prompt, and a crash between the two cannot leave one without
the other. Under the session's own prompt it restates the current epoch: an epoch is a
prompt and its offer, and a compaction changes neither, so it numbers no new one (`tasks
show` would list "epoch 3 (compaction)" where nothing changed).
"""

from __future__ import annotations

from agent import Overflow, PromptEpoch, StoredMessage, Summary, Task
from storage.database import Database
from storage.errors import translate_errors
from storage.history import message_from_row
from storage.memory import begin_epoch, lock_session

# The latest summary before the task's turn (the row marked `latest`) and the messages
# after it that the window no longer shows, in one statement.
_OVERFLOW = """
WITH latest AS (
    SELECT covers_from_seq, covers_to_seq, text FROM summaries
    WHERE session_id = $1 AND covers_to_seq < (SELECT seq FROM messages WHERE id = $2)
    ORDER BY covers_to_seq DESC LIMIT 1
)
(SELECT true AS latest, covers_from_seq, covers_to_seq, NULL AS id, NULL AS session_id,
        NULL AS role, NULL AS kind, text, NULL::boolean AS pinned, NULL::jsonb AS citations,
        NULL::bigint AS anchor
 FROM latest)
UNION ALL
(SELECT false, NULL, NULL, id, session_id, role, kind, text, pinned, citations, anchor
 FROM messages
 WHERE session_id = $1 AND anchor > coalesce((SELECT covers_to_seq FROM latest), 0)
   AND anchor < (SELECT anchor FROM messages WHERE id = $3)
   AND NOT pinned
   AND anchor NOT IN (SELECT anchor FROM messages WHERE session_id = $1 AND pinned)
 ORDER BY anchor, seq
 LIMIT $4)
"""

_STORE = """
INSERT INTO summaries (session_id, covers_from_seq, covers_to_seq, text, prompt_epoch)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (session_id, covers_to_seq) DO NOTHING
RETURNING true
"""


class PostgresSummaries:
    """`agent.SummaryStore` on Postgres."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("The conversation's summary could not be read")
    async def overflow(
        self, task: Task, *, edge_id: str, max_chars: int, max_messages: int
    ) -> Overflow | None:
        read = await self._db.pool.fetch(
            _OVERFLOW, task.session_id, task.newest_turn_id, edge_id, max_messages
        )
        latest = next((r for r in read if r["latest"]), None)
        rows = [r for r in read if not r["latest"]]
        rows_read = [(r["anchor"], message_from_row(r)) for r in rows]
        taken = whole_turns(rows_read, max_chars, limited=len(rows) == max_messages)
        if not taken:
            return None
        covers_from = latest["covers_from_seq"] if latest else taken[0][0]
        previous = latest["text"] if latest else None
        return Overflow(covers_from, taken[-1][0], previous, [m for _, m in taken])

    @translate_errors("The conversation's summary could not be stored")
    async def store_summary(self, session_id: str, summary: Summary, epoch: PromptEpoch) -> None:
        s = summary
        async with self._db.pool.acquire() as conn, conn.transaction():
            session = await lock_session(conn, session_id)
            if session is None:
                return  # no such session: nothing to summarize into
            stored = await conn.fetchval(
                _STORE, session_id, s.covers_from, s.covers_to, s.text, epoch.hash
            )
            # A summary stored before (a re-run) began its epoch then; one under the
            # session's own prompt restates it.
            if stored and session.prompt_epoch != epoch.hash:
                await begin_epoch(conn, session_id, epoch, "compaction")


def whole_turns(
    rows: list[tuple[int, StoredMessage]], max_chars: int, *, limited: bool
) -> list[tuple[int, StoredMessage]]:
    """The oldest rows within `max_chars`, ending at a turn's end (the first turn always,
    however long: a summary has to start somewhere). Rows come oldest first; a turn is
    the rows of one anchor. When the read was `limited` (it hit its row limit), its last
    turn may be cut: it is left for the next time."""
    taken: list[tuple[int, StoredMessage]] = []
    used = 0
    for anchor, message in rows:
        used += len(message.text)
        if used > max_chars and taken and taken[-1][0] != anchor:
            return taken
        taken.append((anchor, message))
    if not limited or not taken:
        return taken
    whole = [t for t in taken if t[0] != taken[-1][0]]
    return whole or taken
