"""The `action_token` of a task's message, kept while the task lives (migration 026).

Slack puts an `action_token` in the event of a message that mentions or DMs the app; with
it, the bot token may search the workspace as that person (Real-time Search), and only
then. The ingress sees the event, a worker — maybe another process — runs the task: so the
token is written with the task, in the admission transaction (`keep_action_token`, and
storage/admission.py's fast path in the same statement), and read by the worker that
searches (`PostgresActionTokens`). The task's end deletes it (a trigger on `tasks`), and so
does anything that deletes the task.

It is a credential: it is never part of a task's row, never in an error (asyncpg's
messages name the key, here the task id, not the token) and never logged.
"""

from __future__ import annotations

from storage.database import Database
from storage.errors import translate_errors
from storage.migrations import Connection

# Written only for a task this admission created: a redelivery writes nothing.
_KEEP = "INSERT INTO task_action_tokens (task_id, token) VALUES ($1, $2) ON CONFLICT DO NOTHING"
_TOKEN_OF = """
SELECT k.token FROM task_action_tokens k JOIN tasks t ON t.id = k.task_id
WHERE k.task_id = $1 AND t.state IN ('queued', 'running', 'waiting')
"""


async def keep_action_token(conn: Connection, task_id: str, token: str | None) -> None:
    """Keep `token` with the task just opened on `conn` (nothing without one)."""
    if token:
        await conn.execute(_KEEP, task_id, token)


class PostgresActionTokens:
    """The action tokens of the tasks that still live."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("The task's action token could not be read")
    async def token_of(self, task_id: str) -> str | None:
        """The task's action token; None when its message brought none (a schedule's run),
        or the task has ended."""
        found = await self._db.pool.fetchval(_TOKEN_OF, task_id)
        return found if isinstance(found, str) else None
