"""A scheduled run held to the limits a person's message is held to, in the transaction
that fires it: its owner's hour, its channel's and its workspace's budgets — and runs that
fire together cannot all pass before any has spent."""

from __future__ import annotations

import asyncio
from datetime import datetime

from agent import ModelCharge, Route, Task, recur_every
from storage import (
    Database,
    Fired,
    Limits,
    NewSchedule,
    PostgresUsageMeter,
    ScheduledRun,
    StoredSchedule,
    create_schedule,
    fire_schedule,
)
from storage.schedules import UNKNOWN_RUN_TOKENS

LATE = 60.0
ROUTE = Route("openai", "gpt-test")


def plan(schedule: StoredSchedule, period: datetime) -> ScheduledRun:
    return ScheduledRun(
        f"T1:{schedule.channel}:schedule:{schedule.id}",
        {"team": "T1", "channel": schedule.channel or "", "thread_ts": ""},
        f"run of {period.isoformat()}",
        f"T1:{schedule.channel}",
    )


async def schedules(db: Database, n: int, *, owner: str | None = None) -> list[StoredSchedule]:
    """`n` schedules of channel C1, every hour."""
    return [
        await create_schedule(
            db,
            NewSchedule(
                "T1", "channel", f"digest {i}", recur_every("1h"), "test", channel="C1", owner=owner
            ),
        )
        for i in range(n)
    ]


async def all_due(db: Database, minutes_ago: int = 1) -> None:
    """Every schedule's next period started `minutes_ago` (each period its own run): they
    fire together."""
    await db.pool.execute(
        "UPDATE schedules SET next_run_at = date_trunc('second', now()) - make_interval(mins => $1),"
        " anchor_at = date_trunc('second', now()) - make_interval(mins => $1)",
        minutes_ago,
    )


async def fire_all(db: Database, made: list[StoredSchedule], limits: Limits) -> list[Fired]:
    """Fire every schedule at once, as schedulers on as many replicas would."""
    fired = await asyncio.gather(
        *(fire_schedule(db, s.id, plan, late_seconds=LATE, limits=limits) for s in made)
    )
    assert all(f is not None for f in fired)
    return [f for f in fired if f is not None]


async def finish(db: Database, fired: list[Fired], tokens: int) -> None:
    """Each run answered, spending `tokens`, and done."""
    meter = PostgresUsageMeter(db)
    for run in fired:
        if run.task_id is None:
            continue
        task = Task(run.task_id, "", {})
        await meter.record(task, ModelCharge(ROUTE, input_tokens=tokens - 5, output_tokens=5))
        await db.pool.execute("UPDATE tasks SET state = 'done' WHERE id = $1", run.task_id)


async def test_runs_firing_together_cannot_overshoot_a_channel_budget(fresh_db: Database) -> None:
    """Four runs of never-run schedules due at once in a channel with a 10-token budget:
    one runs, three wait (a run not known yet is held as `UNKNOWN_RUN_TOKENS`); once it has
    spent 15, the three are refused by the budget. Spent: 15, not 60."""
    made = await schedules(fresh_db, 4)
    await all_due(fresh_db)
    budget = Limits(channel_daily_tokens=10)
    first = await fire_all(fresh_db, made, budget)
    assert sum(f.created for f in first) == 1 and sum(f.waits for f in first) == 3
    await finish(fresh_db, first, 15)
    waiting = [s for s, f in zip(made, first, strict=True) if f.waits]
    second = await fire_all(fresh_db, waiting, budget)
    assert {(f.skipped, f.limited) for f in second} == {(True, "channel_tokens")}
    assert await spent(fresh_db, "channel", "T1:C1") == 15


async def test_runs_with_a_known_spend_share_what_the_budget_has_left(fresh_db: Database) -> None:
    """Three schedules whose last run spent 15 each, due at once with 40 tokens of the
    budget left: two run (15 + 15 fits), the third waits for them; none is refused."""
    made = await schedules(fresh_db, 3)
    await all_due(fresh_db)
    await finish(fresh_db, await fire_all(fresh_db, made, Limits()), 15)  # 45 spent today
    await all_due(fresh_db, minutes_ago=2)
    fired = await fire_all(fresh_db, made, Limits(channel_daily_tokens=45 + 40))
    assert sum(f.created for f in fired) == 2 and sum(f.waits for f in fired) == 1
    assert not any(f.limited for f in fired)
    holds = await fresh_db.pool.fetch(
        "SELECT hold_tokens FROM tasks WHERE state = 'queued' AND schedule_id IS NOT NULL"
    )
    assert [r["hold_tokens"] for r in holds] == [15, 15]


async def test_with_a_budget_far_from_spent_runs_fire_together(fresh_db: Database) -> None:
    """Under the default channel budget (10,000,000 tokens) four never-run schedules due
    at once all run: holding them costs nothing until a budget is nearly spent."""
    made = await schedules(fresh_db, 4)
    await all_due(fresh_db)
    fired = await fire_all(fresh_db, made, Limits(channel_daily_tokens=10_000_000))
    assert all(f.created for f in fired)
    holds = await fresh_db.pool.fetch("SELECT hold_tokens FROM tasks")
    assert [r["hold_tokens"] for r in holds] == [UNKNOWN_RUN_TOKENS] * 4


async def test_a_run_is_held_to_its_workspaces_spend(fresh_db: Database) -> None:
    """A workspace that spent its day's USD gets no scheduled run (the check had been
    built without the workspace, and passed)."""
    [made] = await schedules(fresh_db, 1)
    await fresh_db.pool.execute(
        "INSERT INTO usage_daily (day, scope, key, input_tokens, output_tokens, cost_usd) "
        "VALUES ((now() AT TIME ZONE 'UTC')::date, 'workspace', 'T1', 0, 0, 0.02)"
    )
    await all_due(fresh_db)
    [fired] = await fire_all(fresh_db, [made], Limits(workspace_daily_spend_usd=0.01))
    assert (fired.skipped, fired.limited, fired.task_id) == (True, "workspace_spend", None)


async def test_a_persons_run_counts_in_their_hour_and_an_operators_does_not(
    fresh_db: Database,
) -> None:
    """With one message an hour per person and per thread: a person's first run passes and
    is counted, their second is refused (`user`); an operator's runs are not counted in
    any hour, so they run at any period."""
    hourly = Limits(user_messages_per_hour=1, thread_messages_per_hour=1)
    people = await schedules(fresh_db, 2, owner="T1:U1")
    operators = await schedules(fresh_db, 2)
    await all_due(fresh_db)
    first, second = [await fire_all(fresh_db, [s], hourly) for s in people]
    assert first[0].created and (second[0].skipped, second[0].limited) == (True, "user")
    ran = [await fire_all(fresh_db, [s], hourly) for s in operators]
    assert all(f[0].created for f in ran)
    counted = await fresh_db.pool.fetch("SELECT scope, key, messages FROM admission_counts")
    assert {(r["scope"], r["key"], r["messages"]) for r in counted} == {
        ("user", "T1:U1", 1),
        ("thread", f"T1:C1:schedule:{people[0].id}", 1),
    }


async def spent(db: Database, scope: str, key: str) -> int:
    row = await db.pool.fetchrow(
        "SELECT input_tokens + output_tokens AS tokens, cost_usd FROM usage_daily "
        "WHERE scope = $1 AND key = $2",
        scope,
        key,
    )
    return 0 if row is None else int(row["tokens"])
