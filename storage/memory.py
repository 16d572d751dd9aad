"""Prompt epochs and answer origins in Postgres, as `agent.Memory`.

A session is pinned to the system prompt of its first task: the prompt's text is stored
once under its hash (`prompt_epochs`), and `sessions.prompt_epoch` names it. The common
case — a session already pinned — is one indexed read, and pinning a new one comes in the
same statement (an insert and an update), so two replicas pinning a new session at once
agree on the first.
`reset_session` (the operators' `threadgate sessions reset`) clears the pin, so the
session's next task pins the prompt of the deployment that runs it; it is audited in
`session_interventions`, like task interventions.

Every stored reply and acknowledgment is stamped with the epoch and the route (provider,
model, slot, and its index in the fallback chain) that produced it, for `threadgate tasks
show`.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent import AnswerOrigin, PromptEpoch
from storage.database import Database
from storage.errors import StorageError, translate_errors

_PINNED = """
SELECT e.hash, e.version, e.text FROM sessions s JOIN prompt_epochs e ON e.hash = s.prompt_epoch
WHERE s.id = $1
"""

# The session's epoch, pinning it first when it has none, in one statement (one round
# trip: a new thread's first task waits for it before its first model request). A pinned
# session reads its epoch and writes nothing. An unpinned one gets the epoch stored unless
# it is, and is pinned unless another pinned it first; the stored epoch comes back when
# this pinned it. Nothing comes back when the session was pinned meanwhile (the update
# found it pinned once its lock was free) or does not exist: a fresh read then tells which.
_PIN = """
WITH pinned AS (
    SELECT e.hash, e.version, e.text
    FROM sessions s JOIN prompt_epochs e ON e.hash = s.prompt_epoch
    WHERE s.id = $1
), stored AS (
    INSERT INTO prompt_epochs (hash, version, text)
    SELECT $2, $3, $4 WHERE NOT EXISTS (SELECT 1 FROM pinned)
    ON CONFLICT (hash) DO NOTHING
    RETURNING hash, version, text
), pinning AS (
    UPDATE sessions SET prompt_epoch = $2
    WHERE id = $1 AND prompt_epoch IS NULL AND NOT EXISTS (SELECT 1 FROM pinned)
    RETURNING id
)
SELECT hash, version, text FROM pinned
UNION ALL
SELECT hash, version, text FROM stored, pinning
UNION ALL
SELECT e.hash, e.version, e.text FROM prompt_epochs e, pinning
WHERE e.hash = $2 AND NOT EXISTS (SELECT 1 FROM stored)
"""

_STORE_EPOCH = """
INSERT INTO prompt_epochs (hash, version, text) VALUES ($1, $2, $3) ON CONFLICT (hash) DO NOTHING
"""

_REPIN = "UPDATE sessions SET prompt_epoch = $2 WHERE id = $1"

_STAMP = """
UPDATE messages
SET prompt_epoch = $2, route_provider = $3, route_model = $4, route_slot = $5, route_index = $6
WHERE id = $1 AND prompt_epoch IS NULL AND route_provider IS NULL
"""

_RESET = """
WITH old AS (SELECT id, prompt_epoch FROM sessions WHERE id = $1 FOR UPDATE),
cleared AS (UPDATE sessions s SET prompt_epoch = NULL FROM old WHERE s.id = old.id),
audit AS (
    INSERT INTO session_interventions (session_id, action, actor, reason, from_epoch)
    SELECT old.id, 'reset', $2, $3, old.prompt_epoch FROM old
)
SELECT prompt_epoch FROM old
"""


class UnknownSession(StorageError):
    """No session has the id an operator gave."""


@dataclass(frozen=True, slots=True)
class SessionReset:
    """What `reset_session` did: the epoch the session was pinned to (None: none yet)."""

    session_id: str
    from_epoch: str | None


def slot_name(slot: int) -> str:
    """How a model slot is stored and shown: 0 is the primary model, any other a fallback."""
    return "primary" if slot == 0 else "fallback"


class PostgresMemory:
    """`agent.Memory` on Postgres."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("The session's prompt epoch could not be read")
    async def pin_prompt(self, session_id: str, current: PromptEpoch) -> PromptEpoch:
        row = await self._db.pool.fetchrow(
            _PIN, session_id, current.hash, current.version, current.text
        )
        if row is None:
            row = await self._db.pool.fetchrow(_PINNED, session_id)
        if row is None:  # no such session (a console or test task): the current prompt
            return current
        return PromptEpoch(row["hash"], row["version"], row["text"])

    @translate_errors("The session's prompt epoch could not be stored")
    async def repin_prompt(self, session_id: str, current: PromptEpoch) -> None:
        async with self._db.pool.acquire() as conn, conn.transaction():
            await conn.execute(_STORE_EPOCH, current.hash, current.version, current.text)
            await conn.execute(_REPIN, session_id, current.hash)

    @translate_errors("Where an answer came from could not be stored")
    async def stamp(self, message_id: str, origin: AnswerOrigin) -> None:
        route = origin.route
        await self._db.pool.execute(
            _STAMP,
            message_id,
            origin.prompt_epoch,
            route.provider if route else None,
            route.model if route else None,
            slot_name(route.slot) if route else None,
            route.slot if route else None,
        )


@translate_errors("The session could not be reset")
async def reset_session(
    db: Database, session_id: str, *, actor: str, reason: str | None
) -> SessionReset:
    """Unpin the session's prompt (its next task pins the deployment's current one), and
    record who did it; `UnknownSession` when there is no such session."""
    async with db.pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(_RESET, session_id, actor, reason)
    if row is None:
        raise UnknownSession(
            f"No session has the id {session_id!r}; `threadgate tasks show TASK_ID` shows "
            "a task's session."
        )
    return SessionReset(session_id, row["prompt_epoch"])
