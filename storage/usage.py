"""What answering messages costs, counted in Postgres so every replica sees the same sums.

`PostgresUsageMeter` implements the agent's `UsageMeter` port: one statement per model
response adds one to the task's `model_requests` (the cap on requests per message reads
it), keeps the response in `model_usage` (route, tokens, cost, and who and where it
answered: what `threadgate usage` reports), and adds its tokens and cost to today's (UTC)
usage of the task's user, channel and workspace — what admission reads for the daily token
budgets and spend limits (storage/admission.py). A task admitted before these columns
existed has no user or channel: its requests are counted, its tokens charged to nobody.
A response whose price is unknown adds nothing to the spend (it is not zero: its
`model_usage` row has no cost, and the report says so).
"""

from __future__ import annotations

from agent import ModelCharge, Task
from storage.database import Database
from storage.errors import translate_errors

# $1 task, $2 input, $3 output, $4 cached, $5 written, $6 cost (NULL: unknown), $7-$9 route.
_RECORD = """
WITH t AS (
    UPDATE tasks SET model_requests = model_requests + 1 WHERE id = $1
    RETURNING user_id, channel, address->>'team' AS workspace, model_requests
), charged AS (
    INSERT INTO usage_daily (day, scope, key, input_tokens, output_tokens, cost_usd)
    SELECT (now() AT TIME ZONE 'UTC')::date, s.scope, s.key, $2, $3, coalesce($6::numeric, 0)
    FROM t, LATERAL (VALUES ('user', t.user_id), ('channel', t.channel),
                            ('workspace', t.workspace)) AS s (scope, key)
    WHERE s.key IS NOT NULL
    ON CONFLICT (day, scope, key) DO UPDATE
    SET input_tokens = usage_daily.input_tokens + excluded.input_tokens,
        output_tokens = usage_daily.output_tokens + excluded.output_tokens,
        cost_usd = usage_daily.cost_usd + excluded.cost_usd
), kept AS (
    INSERT INTO model_usage (task_id, workspace, channel, user_id, provider, model, slot,
                             input_tokens, cached_tokens, cache_write_tokens, output_tokens,
                             cost_usd)
    SELECT $1, t.workspace, t.channel, t.user_id, $7, $8, $9, $2, $4, $5, $3, $6::numeric FROM t
)
SELECT model_requests FROM t
"""


class PostgresUsageMeter:
    """`agent.UsageMeter` on Postgres."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("The usage could not be recorded")
    async def record(self, task: Task, charge: ModelCharge) -> int:
        count = await self._db.pool.fetchval(
            _RECORD,
            task.id,
            max(0, charge.input_tokens),
            max(0, charge.output_tokens),
            max(0, charge.cached_tokens),
            max(0, charge.cache_write_tokens),
            charge.cost_usd,
            charge.route.provider,
            charge.route.model,
            charge.route.slot,
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
