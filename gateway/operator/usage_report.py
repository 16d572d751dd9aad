"""`threadgate usage`: who spent the budget — model requests, tokens and USD.

Every model response is kept with its workspace, channel, user, task, route, tokens and
cost (storage/usage.py); this report sums them since a moment (`--since`: an age like
`7d`, or a date), by workspace, channel, user, model or UTC day — a table, or JSON
(`--json`) for scripts. A request whose model the price table did not know has no cost:
its tokens are counted, its cost is reported as unknown, never as zero. Read only, from
any machine that reaches the database.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gateway.config.settings import Settings
from gateway.operator.task_commands import database, one_line, parse_duration, table
from storage import USAGE_GROUPINGS, UsageGrouping, UsageLine, usage_report

DEFAULT_SINCE = "7d"
_COLUMNS = ("{by}", "REQUESTS", "INPUT", "CACHED", "CACHE WRITE", "OUTPUT", "COST USD")


def add_usage_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser(
        "usage", help="model requests, tokens and cost by workspace, channel, user, model or day"
    )
    report.add_argument(
        "--by", choices=USAGE_GROUPINGS, default="channel", help="how to group (channel)"
    )
    report.add_argument(
        "--since",
        type=since,
        default=since(DEFAULT_SINCE),
        metavar="AGE|DATE",
        help=f"requests since AGE ago (2h, 7d) or since DATE (2026-01-31, UTC) ({DEFAULT_SINCE})",
    )
    report.add_argument("--json", action="store_true", help="JSON for scripts")
    report.set_defaults(command=usage_command)


def since(text: str) -> datetime:
    """The moment `--since` names: an age before now, or a UTC date (or date and time)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return datetime.now(UTC) - timedelta(seconds=parse_duration(text))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


async def usage_command(settings: Settings, args: argparse.Namespace) -> int:
    async with database(settings) as db:
        lines = await usage_report(db, args.by, args.since)
    print(report_json(lines, args.by, args.since) if args.json else render_report(lines, args.by))
    return 0


def report_json(lines: Sequence[UsageLine], by: UsageGrouping, moment: datetime) -> str:
    """The report as a JSON object: what it is grouped by, since when, and one object per
    group (`cost_usd` sums the priced requests; `unpriced_requests` had no price)."""
    return json.dumps(
        {
            "by": by,
            "since": moment.isoformat(),
            "rows": [
                {
                    by: line.key or None,
                    "requests": line.requests,
                    "input_tokens": line.input_tokens,
                    "cached_tokens": line.cached_tokens,
                    "cache_write_tokens": line.cache_write_tokens,
                    "output_tokens": line.output_tokens,
                    "cost_usd": float(line.cost_usd),
                    "unpriced_requests": line.unpriced,
                }
                for line in lines
            ],
        },
        indent=2,
    )


def render_report(lines: Sequence[UsageLine], by: UsageGrouping) -> str:
    """One line per group under a header, then the total."""
    if not lines:
        return "No model requests in that time."
    rows = [_row(line.key or "(none)", [line]) for line in lines]
    rows.append(_row("total", lines))
    header = tuple(c.format(by=by.upper()) for c in _COLUMNS)
    return table(header, rows, right_from=1)


def _row(key: str, lines: Sequence[UsageLine]) -> tuple[str, ...]:
    unpriced = sum(line.unpriced for line in lines)
    return (
        one_line(key, 40),
        f"{sum(line.requests for line in lines):,}",
        f"{sum(line.input_tokens for line in lines):,}",
        f"{sum(line.cached_tokens for line in lines):,}",
        f"{sum(line.cache_write_tokens for line in lines):,}",
        f"{sum(line.output_tokens for line in lines):,}",
        _cost(sum((line.cost_usd for line in lines), Decimal(0)), unpriced),
    )


def _cost(usd: Decimal, unpriced: int) -> str:
    """The priced cost, with the requests whose price is unknown said beside it."""
    amount = f"{usd:,.4f}"
    return f"{amount} + unknown ({unpriced:,} unpriced)" if unpriced else amount
