"""Prompt epochs, the epochs of each session, and where answers came from, in Postgres,
as `agent.Memory`.

An epoch (`agent.PromptEpoch`) is stored once under its hash (`prompt_epochs`: the
prompt's text, its offer — the JSON, its hash, the tools' names — and the sub-agents'
prompts). A session goes through epochs numbered from 1 (`session_epochs`: the number, the
epoch, why it began, when); `sessions.prompt_epoch` names the current one.

The common case — a session whose epoch offers what this deployment offers — is one
indexed read that writes nothing. Otherwise one transaction locks the session row, reads
again (another replica may have begun an epoch meanwhile: it then agrees with that one),
stores the epoch unless it is stored, and begins it as the session's next number, saying
why (`EpochReason`): `start`, the session had none; `reset`, an operator reset it
(`threadgate sessions reset` clears the pin, audited in `session_interventions`);
`offer_changed`, the pinned epoch offered something else, or — an epoch from before
offers were recorded — nobody knows what. A compaction begins one too (`compaction`), in
the transaction that stores its summary (storage/summaries.py, through `begin_epoch`).
Sessions pinned before epochs were numbered have theirs as number 1, `legacy` (migration
021). Two deployments serving one thread at once (a rolling deploy) move it back and
forth between their epochs, each move recorded.

Every stored reply and acknowledgment is stamped with the epoch and the route (provider,
model, slot, and its index in the fallback chain) that produced it, and every subtask
with the epoch its run was asked under (its sub-agent's prompt), for `threadgate tasks
show`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg

from agent import AnswerOrigin, EpochReason, PromptEpoch
from storage.database import Database
from storage.errors import StorageError, translate_errors
from storage.migrations import Connection

_EPOCH_COLUMNS = "e.hash, e.version, e.text, e.offer_hash, e.tools, e.subagents"

_CURRENT = f"""
SELECT {_EPOCH_COLUMNS} FROM sessions s JOIN prompt_epochs e ON e.hash = s.prompt_epoch
WHERE s.id = $1
"""

# After the lock (a statement of its own, so that this one sees what the holder before
# us committed): the session's epoch, its last number, and whether it was ever reset.
_LOCK = "SELECT prompt_epoch FROM sessions WHERE id = $1 FOR UPDATE"
_LOCKED = f"""
SELECT {_EPOCH_COLUMNS},
       EXISTS (SELECT 1 FROM session_epochs WHERE session_id = $1) AS had_epochs,
       EXISTS (SELECT 1 FROM session_interventions
               WHERE session_id = $1 AND action = 'reset') AS was_reset
FROM (SELECT 1) one LEFT JOIN prompt_epochs e ON e.hash = $2
"""

# Store the epoch unless stored, number it the session's next, and make it the current
# one; the session row is locked by the caller. Returns the number.
_BEGIN = """
WITH stored AS (
    INSERT INTO prompt_epochs (hash, version, text, offer, offer_hash, tools, subagents)
    VALUES ($2, $3, $4, $5, $6, $7, $8::jsonb) ON CONFLICT (hash) DO NOTHING
), pinned AS (
    UPDATE sessions SET prompt_epoch = $2 WHERE id = $1
)
INSERT INTO session_epochs (session_id, number, epoch, reason)
SELECT $1, coalesce(max(number), 0) + 1, $2, $9 FROM session_epochs WHERE session_id = $1
RETURNING number
"""

_STAMP = """
UPDATE messages
SET prompt_epoch = $2, route_provider = $3, route_model = $4, route_slot = $5, route_index = $6
WHERE id = $1 AND prompt_epoch IS NULL AND route_provider IS NULL
"""

_STAMP_SUBTASK = """
UPDATE subtasks SET prompt_epoch = $5
WHERE task_id = $1 AND round = $2 AND index = $3 AND attempts = $4
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
        row = await self._db.pool.fetchrow(_CURRENT, session_id)
        if row is not None and row["offer_hash"] == current.offer_hash:
            return epoch_from_row(row)
        async with self._db.pool.acquire() as conn, conn.transaction():
            return await self._pin_locked(conn, session_id, current)

    async def _pin_locked(
        self, conn: Connection, session_id: str, current: PromptEpoch
    ) -> PromptEpoch:
        locked = await conn.fetchrow(_LOCK, session_id)
        if locked is None:  # no such session (a console or test task): the current epoch
            return current
        row = await conn.fetchrow(_LOCKED, session_id, locked["prompt_epoch"])
        assert row is not None
        if row["hash"] is not None and row["offer_hash"] == current.offer_hash:
            return epoch_from_row(row)  # begun meanwhile, by another replica
        reason: EpochReason = "offer_changed" if row["hash"] is not None else "start"
        if reason == "start" and (row["had_epochs"] or row["was_reset"]):
            reason = "reset"
        await begin_epoch(conn, session_id, current, reason)
        return current

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

    @translate_errors("The epoch a subtask ran under could not be stored")
    async def stamp_subtask(
        self, task_id: str, round_number: int, index: int, attempt: int, epoch: str
    ) -> None:
        await self._db.pool.execute(_STAMP_SUBTASK, task_id, round_number, index, attempt, epoch)


async def lock_session(conn: Connection, session_id: str) -> bool:
    """Lock the session's row for the transaction (epochs are numbered under it); False
    when there is no such session."""
    return await conn.fetchrow(_LOCK, session_id) is not None


async def begin_epoch(
    conn: Connection, session_id: str, epoch: PromptEpoch, reason: EpochReason
) -> int:
    """Begin `epoch` as the session's next epoch (its row locked by the caller, in the
    caller's transaction), storing it unless stored; its number."""
    number = await conn.fetchval(
        _BEGIN,
        session_id,
        epoch.hash,
        epoch.version,
        epoch.text,
        epoch.offer,
        epoch.offer_hash,
        list(epoch.tools),
        json.dumps(dict(epoch.subagents)),
        reason,
    )
    return int(number)


def epoch_from_row(row: asyncpg.Record) -> PromptEpoch:
    """An epoch as stored (without its offer's JSON: its hash stands for it)."""
    return PromptEpoch(
        row["hash"],
        row["version"],
        row["text"],
        offer_hash=row["offer_hash"],
        tools=tuple(row["tools"] or ()),
        subagents=tuple(sorted(_object(row["subagents"]).items())),
    )


def _object(value: Any) -> dict[str, str]:
    return dict(json.loads(value) if isinstance(value, str) else value or {})


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
