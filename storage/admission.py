"""Making an incoming message durable: the one transaction that must commit before the ack.

Admission records, atomically: the delivery (by event id), the session, the user's turn
and the task that will answer it. A delivery seen before, or a second event for a message
that already has a task (Slack sends both `message` and `app_mention` for one mention),
admits nothing. The NOTIFY in the same transaction wakes a worker the moment it commits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent import user_message_id
from storage.database import TASKS_CHANNEL, Database
from storage.errors import translate_errors


@dataclass(frozen=True, slots=True)
class EarlierMessage:
    """A message that preceded the turn in its thread (back-fill), already rendered."""

    id: str
    text: str


@dataclass(frozen=True, slots=True)
class Admission:
    event_id: str | None
    task_id: str
    session_id: str
    address: Mapping[str, str]
    turn_text: str
    earlier: Sequence[EarlierMessage] = field(default_factory=tuple)


_INSERT_TURN = """
WITH s AS (SELECT nextval(pg_get_serial_sequence('messages', 'seq')) AS seq)
INSERT INTO messages (seq, id, session_id, anchor, role, kind, text)
SELECT s.seq, $1, $2, s.seq, 'user', 'turn', $3 FROM s
ON CONFLICT (id) DO NOTHING
"""


# Admission in one statement (one implicit transaction): the delivery, the session, the
# task, the turn (its own anchor) and the wake-up. Nothing after `go` happens for a
# delivery seen before; nothing after `task` for a message that already has its task.
_ADMIT = """
WITH ev AS (
    INSERT INTO seen_events (event_id) SELECT $1::text WHERE $1::text IS NOT NULL
    ON CONFLICT DO NOTHING RETURNING true
), go AS (
    SELECT true WHERE $1::text IS NULL OR EXISTS (SELECT 1 FROM ev)
), ses AS (
    INSERT INTO sessions (id) SELECT $2 FROM go ON CONFLICT DO NOTHING
), task AS (
    INSERT INTO tasks (id, session_id, address) SELECT $3, $2, $4::jsonb FROM go
    ON CONFLICT DO NOTHING RETURNING id
), turn AS (
    INSERT INTO messages (seq, id, session_id, anchor, role, kind, text)
    SELECT s.seq, $5, $2, s.seq, 'user', 'turn', $6
    FROM task, LATERAL (SELECT nextval(pg_get_serial_sequence('messages', 'seq')) AS seq) s
    ON CONFLICT (id) DO NOTHING
)
SELECT count(pg_notify($7, '')) > 0 FROM task
"""


@translate_errors("The session could not be looked up")
async def session_exists(db: Database, session_id: str) -> bool:
    """Whether this conversation has been seen (the bot takes part in it)."""
    return bool(await db.pool.fetchval("SELECT true FROM sessions WHERE id = $1", session_id))


@translate_errors("The turn could not be stored")
async def admit(db: Database, a: Admission) -> bool:
    """Make the turn and its task durable. False when this delivery was a duplicate."""
    if not a.earlier:  # the common case, in one round trip
        created = await db.pool.fetchval(
            _ADMIT,
            a.event_id,
            a.session_id,
            a.task_id,
            json.dumps(dict(a.address)),
            user_message_id(a.task_id),
            a.turn_text,
            TASKS_CHANNEL,
        )
        return bool(created)
    async with db.pool.acquire() as conn, conn.transaction():
        if a.event_id is not None:
            fresh = await conn.fetchval(
                "INSERT INTO seen_events (event_id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING true",
                a.event_id,
            )
            if not fresh:
                return False
        created = await conn.fetchval(
            "WITH s AS (INSERT INTO sessions (id) VALUES ($1) ON CONFLICT DO NOTHING) "
            "INSERT INTO tasks (id, session_id, address) VALUES ($2, $1, $3) "
            "ON CONFLICT DO NOTHING RETURNING true",
            a.session_id,
            a.task_id,
            json.dumps(dict(a.address)),
        )
        if not created:
            return False
        for earlier in a.earlier:
            await conn.execute(_INSERT_TURN, earlier.id, a.session_id, earlier.text)
        await conn.execute(_INSERT_TURN, user_message_id(a.task_id), a.session_id, a.turn_text)
        await conn.execute("SELECT pg_notify($1, '')", TASKS_CHANNEL)
    return True
