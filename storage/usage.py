"""What answering messages costs, counted in Postgres so every replica sees the same sums.

`PostgresUsageMeter` implements the agent's `UsageMeter` port: one statement per model
response adds one to the task's `model_requests` (the cap on requests per message reads
it) and the response's tokens, as the provider reported them, to today's (UTC) usage of
the task's user and channel — what admission reads for the daily token budgets
(storage/admission.py). A task admitted before these columns existed has no user or
channel: its requests are counted, its tokens charged to nobody.
"""

from __future__ import annotations

from agent import Task
from storage.database import Database
from storage.errors import translate_errors

_RECORD = """
WITH t AS (
    UPDATE tasks SET model_requests = model_requests + 1 WHERE id = $1
    RETURNING user_id, channel, model_requests
), charged AS (
    INSERT INTO usage_daily (day, scope, key, input_tokens, output_tokens)
    SELECT (now() AT TIME ZONE 'UTC')::date, s.scope, s.key, $2, $3
    FROM t, LATERAL (VALUES ('user', t.user_id), ('channel', t.channel)) AS s (scope, key)
    WHERE s.key IS NOT NULL
    ON CONFLICT (day, scope, key) DO UPDATE
    SET input_tokens = usage_daily.input_tokens + excluded.input_tokens,
        output_tokens = usage_daily.output_tokens + excluded.output_tokens
)
SELECT model_requests FROM t
"""


class PostgresUsageMeter:
    """`agent.UsageMeter` on Postgres."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("The usage could not be recorded")
    async def record(self, task: Task, input_tokens: int, output_tokens: int) -> int:
        count = await self._db.pool.fetchval(
            _RECORD, task.id, max(0, input_tokens), max(0, output_tokens)
        )
        return int(count or 0)


@translate_errors("The usage could not be read")
async def tokens_today(db: Database) -> tuple[int, int]:
    """Input and output tokens every channel used today (UTC), all replicas together."""
    row = await db.pool.fetchrow(
        "SELECT coalesce(sum(input_tokens), 0)::bigint AS input,"
        " coalesce(sum(output_tokens), 0)::bigint AS output FROM usage_daily"
        " WHERE day = (now() AT TIME ZONE 'UTC')::date AND scope = 'channel'"
    )
    return (0, 0) if row is None else (int(row["input"]), int(row["output"]))
