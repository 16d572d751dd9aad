"""Prompt epochs, the epochs of each session, and where answers came from, in Postgres,
as `agent.Memory`.

An epoch (`agent.PromptEpoch`) is stored once under its hash (`prompt_epochs`: the
prompt's text, its offer — the JSON, its hash, the tools' names — and the sub-agents'
prompts). A session goes through epochs numbered from 1 (`session_epochs`: the number, the
epoch, why it began, when); `sessions.prompt_epoch` names the current one.

A pin is one round trip, `pin_epoch` (migration 023): in the common case — a session
whose epoch offers what this deployment offers — an indexed read that writes nothing.
Otherwise it locks the session row, reads again (another replica may have begun an epoch
meanwhile: it then agrees with that one), stores the epoch unless it is stored, and
begins it as the session's next number, saying why (`EpochReason`): `start`, the session
had none; `reset`, an operator reset it (`threadgate sessions reset` clears the pin,
audited in `session_interventions`);
`offer_changed`, the pinned epoch offered something else, or — an epoch from before
offers were recorded — nobody knows what. A compaction under another prompt than the
session's begins one too (`compaction`), in the transaction that stores its summary
(storage/summaries.py, through `begin_epoch`); under the session's own prompt it restates
the current epoch and numbers none (nothing changed for `tasks show` to list).
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

# One round trip (migration 023's `pin_epoch` says how): the session's epoch, and what
# happened. `text` is NULL where the answer is the caller's own epoch, which the caller
# has: its tools' names and sub-agents' prompts (a kilobyte and more) then stay on the
# server, as the caller's stay with it when it sends no text (`pin_epoch` reads them only
# to store an epoch, and stores none without its text). That is every round's pin but a
# session's first on a deployment.
_PIN = """
SELECT out_hash AS hash, out_version AS version, out_text AS text,
       out_offer_hash AS offer_hash,
       CASE WHEN out_text IS NULL THEN NULL ELSE out_tools END AS tools,
       CASE WHEN out_text IS NULL THEN NULL ELSE out_subagents END AS subagents,
       out_outcome AS outcome
FROM pin_epoch($1, $2, $3, $4, $5, $6, $7, $8::jsonb)
"""

# The session row locked for a transaction of the caller's (a compaction's).
_LOCK = "SELECT prompt_epoch FROM sessions WHERE id = $1 FOR UPDATE"

# Begin an epoch as the session's next (migration 023's `begin_epoch`: stored unless
# stored, made current, numbered); the session row is locked by the caller.
_BEGIN = "SELECT begin_epoch($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9)"

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
        # Epochs this process knows are stored (a stored epoch is never deleted): a new
        # session's pin then sends their hash, not their text and offer (kilobytes each).
        self._stored: set[str] = set()

    @translate_errors("The session's prompt epoch could not be read")
    async def pin_prompt(self, session_id: str, current: PromptEpoch) -> PromptEpoch:
        row = await self._pin(session_id, current, with_text=current.hash not in self._stored)
        if row["outcome"] == "unstored":  # believed stored, and it is not: send it
            row = await self._pin(session_id, current, with_text=True)
        if row["outcome"] == "no_session":  # a console or test task: the current epoch
            return current
        if row["text"] is None:  # the session is asked under the caller's own epoch
            self._stored.add(current.hash)
            return current
        return epoch_from_row(row)

    async def _pin(self, session_id: str, epoch: PromptEpoch, *, with_text: bool) -> Any:
        return await self._db.pool.fetchrow(
            _PIN,
            session_id,
            epoch.hash,
            epoch.version,
            epoch.text if with_text else None,
            epoch.offer if with_text else None,
            epoch.offer_hash,
            list(epoch.tools) if with_text else None,
            json.dumps(dict(epoch.subagents)) if with_text else None,
        )

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


@dataclass(frozen=True, slots=True)
class LockedSession:
    """A session's row, locked for the caller's transaction: its current epoch (None: none
    pinned, as after a reset)."""

    prompt_epoch: str | None


async def lock_session(conn: Connection, session_id: str) -> LockedSession | None:
    """Lock the session's row for the transaction (epochs are numbered under it); None
    when there is no such session."""
    row = await conn.fetchrow(_LOCK, session_id)
    return LockedSession(row["prompt_epoch"]) if row is not None else None


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
