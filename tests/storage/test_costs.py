"""What answers cost, in Postgres: each response kept with its route, tokens and cost, the
daily spend limits at admission, and the sums `threadgate usage` reads."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from agent import ModelCharge, Route, Task
from storage.admission import Admission, Limits, admit, before_downloads
from storage.database import Database
from storage.usage import PostgresUsageMeter
from storage.usage_report import usage_report

NOTICES = Limits(notices={"channel_spend": "channel spend notice", "workspace_spend": "ws notice"})
ROUTE = Route("anthropic", "claude-sonnet-4-5", 0)


def message(ts: str, *, team: str, channel: str, user: str = "U1") -> Admission:
    task = f"{team}:{channel}:{ts}"
    return Admission(
        event_id=f"Ev{team}{channel}{ts}",
        task_id=task,
        session_id=task,
        address={"team": team, "channel": channel, "thread_ts": ts},
        turn_text="<turn>hi</turn>",
        user=f"{team}:{user}",
        channel=f"{team}:{channel}",
    )


def task_of(a: Admission) -> Task:
    return Task(a.task_id, a.session_id, a.address)


def charge(cost: str | None, input_tokens: int = 1000, cached: int = 800) -> ModelCharge:
    usd = Decimal(cost) if cost is not None else None
    return ModelCharge(ROUTE, input_tokens, 50, cached, 100, usd)


async def test_each_response_is_kept_with_who_where_route_tokens_and_cost(db: Database) -> None:
    a = message("1.1", team="TC1", channel="CA")
    assert await admit(db, a)
    meter = PostgresUsageMeter(db)
    assert await meter.record(task_of(a), charge("0.0125")) == 1
    assert await meter.record(task_of(a), charge(None)) == 2
    rows = await db.pool.fetch(
        "SELECT task_id, workspace, channel, user_id, provider, model, slot, input_tokens,"
        " cached_tokens, cache_write_tokens, output_tokens, cost_usd FROM model_usage"
        " WHERE task_id = $1 ORDER BY id",
        a.task_id,
    )
    assert [tuple(r) for r in rows] == [
        (a.task_id, "TC1", "TC1:CA", "TC1:U1", "anthropic", "claude-sonnet-4-5", 0, 1000, 800,
         100, 50, Decimal("0.0125")),
        (a.task_id, "TC1", "TC1:CA", "TC1:U1", "anthropic", "claude-sonnet-4-5", 0, 1000, 800,
         100, 50, None),
    ]  # fmt: skip
    spent = await db.pool.fetch(
        "SELECT scope, cost_usd FROM usage_daily WHERE key IN ('TC1', 'TC1:CA', 'TC1:U1')"
        " ORDER BY scope"
    )
    assert [tuple(r) for r in spent] == [
        ("channel", Decimal("0.0125")),
        ("user", Decimal("0.0125")),
        ("workspace", Decimal("0.0125")),
    ]  # the unpriced answer adds nothing to the spend


async def test_a_channel_past_its_daily_spend_gets_one_notice(db: Database) -> None:
    rule = dataclasses.replace(NOTICES, channel_daily_spend_usd=0.01)
    first = message("2.1", team="TC2", channel="CB")
    assert await admit(db, first, rule)
    await PostgresUsageMeter(db).record(task_of(first), charge("0.01"))
    over = await admit(db, message("2.2", team="TC2", channel="CB"), rule)
    later = await admit(db, message("2.3", team="TC2", channel="CB", user="U2"), rule)
    assert (over.limited, over.noticed, bool(over)) == ("channel_spend", True, False)
    assert (later.limited, later.noticed) == ("channel_spend", False)
    reply = await db.pool.fetchval(
        "SELECT text FROM messages WHERE id = $1", "task:TC2:CB:2.2:reply"
    )
    assert reply == "channel spend notice"
    assert await admit(db, message("2.4", team="TC2", channel="CC"), rule)  # another channel
    checked = await before_downloads(db, message("2.5", team="TC2", channel="CB"), rule)
    assert checked.limited == "channel_spend"


async def test_a_workspace_past_its_daily_spend_refuses_every_channel(db: Database) -> None:
    rule = dataclasses.replace(NOTICES, workspace_daily_spend_usd=0.02)
    first = message("3.1", team="TC3", channel="CD")
    assert await admit(db, first, rule)
    await PostgresUsageMeter(db).record(task_of(first), charge("0.025"))
    elsewhere = await admit(db, message("3.2", team="TC3", channel="CE"), rule)
    assert (elsewhere.limited, elsewhere.noticed) == ("workspace_spend", True)
    assert await admit(db, message("3.3", team="TC4", channel="CD"), rule)  # another workspace


async def test_the_report_sums_by_what_is_asked_and_counts_the_unpriced(db: Database) -> None:
    a = message("4.1", team="TC5", channel="CF")
    b = message("4.2", team="TC5", channel="CG", user="U2")
    assert await admit(db, a) and await admit(db, b)
    meter = PostgresUsageMeter(db)
    await meter.record(task_of(a), charge("0.5"))
    await meter.record(task_of(a), charge(None))
    await meter.record(task_of(b), charge("0.25"))
    since = datetime.now(UTC) - timedelta(minutes=5)
    lines = {line.key: line for line in await usage_report(db, "channel", since)}
    assert (lines["TC5:CF"].requests, lines["TC5:CF"].unpriced) == (2, 1)
    assert lines["TC5:CF"].cost_usd == Decimal("0.5")
    assert lines["TC5:CF"].input_tokens == 2000 and lines["TC5:CF"].cached_tokens == 1600
    assert (lines["TC5:CG"].requests, lines["TC5:CG"].cost_usd) == (1, Decimal("0.25"))
    users = {line.key for line in await usage_report(db, "user", since)}
    assert {"TC5:U1", "TC5:U2"} <= users
    days = await usage_report(db, "day", since)
    assert days[0].key == datetime.now(UTC).strftime("%Y-%m-%d")
    assert await usage_report(db, "model", datetime.now(UTC) + timedelta(hours=1)) == []
