"""What one person has going on, read and changed by that person alone.

The slash command (`/threadgate status`, `stop`, `new`, `usage`, `schedules`) and the App
Home read and change a person's own things only; this module is those reads and changes,
each keyed by the person ("team:user", as admission writes `tasks.user_id` and the daily
usage) so nobody's question can reach another person's rows:

- `open_tasks`: their queued, running and waiting tasks (in one channel, or anywhere),
  with where they are and their age — no message text;
- `usage_of`: the tokens and cost of a user or a channel today and this month (UTC), from
  the daily sums admission's budgets read (storage/usage.py);
- `act_once`: a command that changes something (stop, new, schedules delete) runs in one
  transaction with the record of its delivery (`seen_events`, keyed by Slack's
  `trigger_id`), so a redelivery — a Socket Mode retry, say — changes nothing a second
  time; `AGAIN` says it was one. The step's own refusal (a session busy) rolls the record
  back with it, so asking again is asked afresh;
- `count_command`: the person's hourly message limit counts their commands too (one row of
  `admission_counts`, as a message's admission counts it), so the command cannot be used
  to flood the database where messages could not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Final, Literal, TypeAlias, TypeVar

from storage.database import Database
from storage.errors import translate_errors
from storage.migrations import Connection

T = TypeVar("T")

_OPEN = """
SELECT id, state, address->>'channel' AS channel, address->>'thread_ts' AS thread_ts,
       stopped_at IS NOT NULL AS stopping, now() - created_at AS age
FROM tasks
WHERE state IN ('queued', 'running', 'waiting') AND user_id = $1
  AND ($2::text IS NULL OR channel = $2)
ORDER BY seq LIMIT $3
"""

_USAGE = """
WITH d AS (SELECT (now() AT TIME ZONE 'UTC')::date AS today)
SELECT coalesce(sum(u.input_tokens + u.output_tokens) FILTER (WHERE u.day = d.today), 0)::bigint
           AS today_tokens,
       coalesce(sum(u.cost_usd) FILTER (WHERE u.day = d.today), 0) AS today_usd,
       coalesce(sum(u.input_tokens + u.output_tokens), 0)::bigint AS month_tokens,
       coalesce(sum(u.cost_usd), 0) AS month_usd
FROM usage_daily u, d
WHERE u.scope = $1 AND u.key = $2 AND u.day >= date_trunc('month', d.today)::date
"""

_SEEN = "INSERT INTO seen_events (event_id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING true"

_COUNT = """
INSERT INTO admission_counts AS a (scope, key, window_start, messages)
VALUES ('user', $1, date_trunc('hour', now(), 'UTC'), 1)
ON CONFLICT (scope, key, window_start) DO UPDATE SET messages = a.messages + 1
RETURNING messages
"""

UsageScope: TypeAlias = Literal["user", "channel"]


@dataclass(frozen=True, slots=True)
class OwnTask:
    """One open task of a person: where it answers, its state (`stopping`: stopped, its
    note not out yet) and how long ago it was asked."""

    id: str
    state: str
    channel: str
    thread_ts: str
    age: timedelta
    stopping: bool = False


@dataclass(frozen=True, slots=True)
class UsageSums:
    """Tokens (input and output) and cost in USD, today and this month (UTC); the cost of
    answers whose price was unknown is not in it."""

    today_tokens: int = 0
    today_usd: Decimal = Decimal(0)
    month_tokens: int = 0
    month_usd: Decimal = Decimal(0)


class Again:
    """The marker `act_once` returns for a redelivery."""

    def __repr__(self) -> str:
        return "AGAIN"


AGAIN: Final = Again()


@translate_errors("The person's tasks could not be read")
async def open_tasks(
    db: Database, team: str, user: str, *, channel: str | None = None, limit: int = 20
) -> list[OwnTask]:
    """The person's open tasks, oldest first: in `channel`, or anywhere."""
    where = f"{team}:{channel}" if channel else None
    rows = await db.pool.fetch(_OPEN, f"{team}:{user}", where, limit)
    return [
        OwnTask(r["id"], r["state"], r["channel"], r["thread_ts"], r["age"], r["stopping"])
        for r in rows
    ]


@translate_errors("The usage could not be read")
async def usage_of(db: Database, scope: UsageScope, team: str, key: str) -> UsageSums:
    """A user's (`key` a user id) or a channel's usage today and this month."""
    row = await db.pool.fetchrow(_USAGE, scope, f"{team}:{key}")
    if row is None:
        return UsageSums()
    return UsageSums(
        int(row["today_tokens"]),
        Decimal(row["today_usd"]),
        int(row["month_tokens"]),
        Decimal(row["month_usd"]),
    )


@translate_errors("The command could not be carried out")
async def act_once(db: Database, key: str, step: Callable[[Connection], Awaitable[T]]) -> T | Again:
    """`step` in one transaction with the record that `key` was acted on; `AGAIN` (and
    nothing done) when it already was."""
    async with db.pool.acquire() as conn, conn.transaction():
        if not await conn.fetchval(_SEEN, key):
            return AGAIN
        return await step(conn)


@translate_errors("The command could not be counted")
async def count_command(db: Database, team: str, user: str, *, per_hour: int) -> bool:
    """Count one command against the person's hourly message limit (0: none); whether it
    is within it."""
    if per_hour <= 0:
        return True
    return int(await db.pool.fetchval(_COUNT, f"{team}:{user}")) <= per_hour
