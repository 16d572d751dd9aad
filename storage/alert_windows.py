"""Operator alert windows in Postgres: one alert per kind of failure per window, for every
replica together (`agent.AlertThrottle`).

A kind's row (migration 016) holds its current window. `note` runs in one transaction
that locks the row: a failure that finds a window open counts itself as a repeat; one
that finds none — the row is new, or its window is over, or its alert `failed`, or it is
still `sending` after `send_seconds` (its sender died) — opens the next window under a
claim of its own, and learns how many repeats the window before held back. So two
replicas refused at the same moment send one alert between them; the one that waited on
the lock counts as a repeat. `settle` and `outcome` name the window by its claim, so the
late settle of a window opened again since changes nothing.

First seen is when the current run of failures began: it is kept while failures come at
least once a window, and starts again after a quieter gap.
"""

from __future__ import annotations

import secrets
from typing import cast

import asyncpg

from agent import AlertOutcome, AlertTurn
from storage.database import Database
from storage.errors import translate_errors

_FIRST = """
INSERT INTO operator_alerts (key, claim, state, opened_at, first_seen, last_seen)
VALUES ($1, $2, 'sending', now(), now(), now())
ON CONFLICT (key) DO NOTHING
RETURNING claim, first_seen, last_seen, 0 AS suppressed
"""

# $2 the window, $3 how long an alert may be sending before its window is taken over.
_OPEN = """
SELECT suppressed,
       state <> 'failed'
       AND now() - opened_at < make_interval(
           secs => CASE WHEN state = 'sending' THEN least($2::float8, $3::float8) ELSE $2::float8 END) AS open
FROM operator_alerts WHERE key = $1 FOR UPDATE
"""

_REPEAT = """
UPDATE operator_alerts SET suppressed = suppressed + 1, last_seen = now() WHERE key = $1
RETURNING claim, first_seen, last_seen, 0 AS suppressed
"""

# $2 the new claim, $3 the window, $4 what the window before held back.
_REOPEN = """
UPDATE operator_alerts
SET claim = $2, state = 'sending', opened_at = now(), suppressed = 0, last_seen = now(),
    first_seen = CASE WHEN now() - last_seen < make_interval(secs => $3::float8) THEN first_seen
                      ELSE now() END
WHERE key = $1
RETURNING claim, first_seen, last_seen, $4::integer AS suppressed
"""

_SETTLE = "UPDATE operator_alerts SET state = $3 WHERE key = $1 AND claim = $2"
_OUTCOME = "SELECT state FROM operator_alerts WHERE key = $1 AND claim = $2"


class PostgresAlertThrottle:
    """`agent.AlertThrottle` on Postgres (module docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("The operator alert could not be counted")
    async def note(self, key: str, *, window_seconds: float, send_seconds: float) -> AlertTurn:
        claim = secrets.token_hex(8)
        async with self._db.pool.acquire() as conn, conn.transaction():
            first = await conn.fetchrow(_FIRST, key, claim)
            if first is not None:
                return _turn(key, first, claim)
            current = await conn.fetchrow(_OPEN, key, window_seconds, send_seconds)
            assert current is not None  # the row exists: the insert found it
            if current["open"]:
                return _turn(key, await conn.fetchrow(_REPEAT, key), claim)
            row = await conn.fetchrow(_REOPEN, key, claim, window_seconds, current["suppressed"])
            return _turn(key, row, claim)

    @translate_errors("The operator alert's outcome could not be recorded")
    async def settle(self, turn: AlertTurn, outcome: AlertOutcome) -> None:
        await self._db.pool.execute(_SETTLE, turn.key, turn.claim, outcome)

    @translate_errors("The operator alert's outcome could not be read")
    async def outcome(self, turn: AlertTurn) -> AlertOutcome | None:
        state = await self._db.pool.fetchval(_OUTCOME, turn.key, turn.claim)
        if state is None:  # opened again since (the alert failed, or its sender died)
            return "failed"
        return None if state == "sending" else cast(AlertOutcome, state)


def _turn(key: str, row: asyncpg.Record | None, claim: str) -> AlertTurn:
    assert row is not None  # the row is locked: every statement above finds it
    return AlertTurn(
        key,
        row["claim"],
        ours=row["claim"] == claim,
        first_seen=row["first_seen"],
        last_seen=row["last_seen"],
        suppressed=row["suppressed"],
    )
