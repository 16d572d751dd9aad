"""One session leaves the database, or its history does, at an operator's word.

The session store's contract has two verbs beside reading and appending, and this module
is them (`threadgate sessions delete` and `clear`, gateway/operator/task_commands.py):

- `delete_session`: the session and everything it holds go — its messages (their
  pictures and documents, and the votes on its replies, cascade), its summaries, its
  epochs and its audit rows, and its tasks with every row that belongs to one (the same
  list, in the same order, retention deletes a finished task by: `TASK_ROWS`). A
  later message in the thread begins a new session under the same id.
- `clear_session`: its history goes — messages and summaries, pins with them — and the
  session stays: its prompt epoch and epochs, its tasks and what `tasks show` reads of
  them, its picture counter (deleting gives no budget back, storage/pictures.py), and its
  audit rows, to which the clear adds one (who, why; migration 031).

Both refuse, with a sentence saying what to do, while a task of the session is open
(queued, running or waiting on subtasks or a person): its window and the anchor its
reply hangs on are read from the very rows either verb would delete. The check and the
deletion are one transaction holding the session row (`FOR UPDATE`), which admission's
inserts of a new task wait for, so no task can be admitted between the two.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.database import Database
from storage.errors import StorageError, translate_errors
from storage.memory import UnknownSession
from storage.migrations import Connection
from storage.retention import TASK_ROWS, command_count

_LOCK = "SELECT id FROM sessions WHERE id = $1 FOR UPDATE"

_OPEN_TASK = """
SELECT id, state FROM tasks
WHERE session_id = $1 AND state IN ('queued', 'running', 'waiting')
ORDER BY seq LIMIT 1
"""

_TASKS = "SELECT id FROM tasks WHERE session_id = $1"

# The history: messages (attachments and votes cascade) and the summaries retelling them.
_HISTORY = (
    ("messages", "DELETE FROM messages WHERE session_id = $1"),
    ("summaries", "DELETE FROM summaries WHERE session_id = $1"),
)

# What is left of a session once its tasks and history are gone (its epochs cascade).
_CLEARED = """
INSERT INTO session_interventions (session_id, action, actor, reason, from_epoch)
SELECT id, 'clear', $2, $3, prompt_epoch FROM sessions WHERE id = $1
"""

_SESSION = (
    ("session_interventions", "DELETE FROM session_interventions WHERE session_id = $1"),
    ("sessions", "DELETE FROM sessions WHERE id = $1"),
)


class SessionBusy(StorageError):
    """A task of the session is open: deleting or clearing it now would pull its
    conversation from under it."""


@dataclass(frozen=True, slots=True)
class SessionRemoved:
    """What `delete_session` or `clear_session` removed, by table (tables it left alone
    are absent)."""

    session_id: str
    deleted: dict[str, int]

    def count(self, table: str) -> int:
        return self.deleted.get(table, 0)


@translate_errors("The session could not be deleted")
async def delete_session(db: Database, session_id: str) -> SessionRemoved:
    """Delete the session and everything it holds (module docstring); `UnknownSession`
    when there is none, `SessionBusy` while one of its tasks is open."""
    async with db.pool.acquire() as conn, conn.transaction():
        await _held(conn, session_id, "delete", "deleted")
        tasks = [row["id"] for row in await conn.fetch(_TASKS, session_id)]
        deleted: dict[str, int] = {}
        for table, statement in TASK_ROWS:
            _add(deleted, table, await conn.execute(statement, tasks))
        for table, statement in (*_HISTORY, *_SESSION):
            _add(deleted, table, await conn.execute(statement, session_id))
    return SessionRemoved(session_id, deleted)


@translate_errors("The session could not be cleared")
async def clear_session(
    db: Database, session_id: str, *, actor: str, reason: str | None
) -> SessionRemoved:
    """Delete the session's history and keep the session, recording who cleared it and
    why (module docstring); `UnknownSession` when there is none, `SessionBusy` while one
    of its tasks is open."""
    async with db.pool.acquire() as conn, conn.transaction():
        return await clear_session_on(conn, session_id, actor=actor, reason=reason)


async def clear_session_on(
    conn: Connection, session_id: str, *, actor: str, reason: str | None
) -> SessionRemoved:
    """`clear_session` in the caller's transaction (a person's `/threadgate new`, which
    records its delivery in the same one: storage/own_work.py)."""
    await _held(conn, session_id, "clear", "cleared")
    deleted: dict[str, int] = {}
    for table, statement in _HISTORY:
        _add(deleted, table, await conn.execute(statement, session_id))
    await conn.execute(_CLEARED, session_id, actor, reason)
    return SessionRemoved(session_id, deleted)


async def _held(conn: Connection, session_id: str, verb: str, done: str) -> None:
    """Lock the session's row for the transaction; raise unless it exists with no open
    task."""
    if await conn.fetchval(_LOCK, session_id) is None:
        raise UnknownSession(
            f"No session has the id {session_id!r}; `threadgate tasks show TASK_ID` shows "
            "a task's session."
        )
    task = await conn.fetchrow(_OPEN_TASK, session_id)
    if task is not None:
        raise SessionBusy(
            f"Session {session_id} was not {done}: its task {task['id']} is "
            f"{task['state']}; cancel it (`threadgate tasks cancel {task['id']}`) or let "
            f"it finish, then {verb} the session again."
        )


def _add(deleted: dict[str, int], table: str, status: str) -> None:
    if count := command_count(status):
        deleted[table] = deleted.get(table, 0) + count
