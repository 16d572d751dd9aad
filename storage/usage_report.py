"""What the model requests cost, summed for `threadgate usage`.

One read of `model_usage` (storage/usage.py keeps a row per response) grouped by what
the operator asks — the workspace, channel, user, model or UTC day — since a moment.
Costs are summed over the priced rows only; the rows the price table could not price are
counted apart (`unpriced`), so an unknown price never reads as a zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Literal, TypeAlias

from storage.database import Database
from storage.errors import translate_errors

UsageGrouping: TypeAlias = Literal["workspace", "channel", "user", "model", "day"]
USAGE_GROUPINGS: tuple[UsageGrouping, ...] = ("workspace", "channel", "user", "model", "day")

# What each grouping groups by (constants, never input: the column is chosen from these).
_KEYS: dict[UsageGrouping, str] = {
    "workspace": "coalesce(workspace, '')",
    "channel": "coalesce(channel, '')",
    "user": "coalesce(user_id, '')",
    "model": "provider || ':' || model",
    "day": "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
}

_REPORT = """
SELECT {key} AS key, count(*) AS requests,
       sum(input_tokens)::bigint AS input_tokens, sum(cached_tokens)::bigint AS cached_tokens,
       sum(cache_write_tokens)::bigint AS cache_write_tokens,
       sum(output_tokens)::bigint AS output_tokens,
       coalesce(sum(cost_usd), 0) AS cost_usd, count(*) FILTER (WHERE cost_usd IS NULL) AS unpriced
FROM model_usage WHERE at >= $1
GROUP BY 1 ORDER BY coalesce(sum(cost_usd), 0) DESC, 1
"""


@dataclass(frozen=True, slots=True)
class UsageLine:
    """One group's requests, tokens and cost (`cost_usd` of the priced requests only;
    `unpriced` requests have no price). `key` is "" for requests with no such key (a
    console task has no channel)."""

    key: str
    requests: int
    input_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    output_tokens: int
    cost_usd: Decimal
    unpriced: int


@translate_errors("The usage could not be read")
async def usage_report(db: Database, by: UsageGrouping, since: datetime) -> list[UsageLine]:
    """The usage since `since`, one line per `by`, the costliest first."""
    rows = await db.pool.fetch(_REPORT.format(key=_KEYS[by]), since)
    return [
        UsageLine(
            str(r["key"]),
            int(r["requests"]),
            int(r["input_tokens"]),
            int(r["cached_tokens"]),
            int(r["cache_write_tokens"]),
            int(r["output_tokens"]),
            Decimal(r["cost_usd"]),
            int(r["unpriced"]),
        )
        for r in rows
    ]
