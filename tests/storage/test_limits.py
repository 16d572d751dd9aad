"""The guard rails at admission and the usage meter, against a real Postgres.

Limits are checked in the admission statement, so what these tests see is what several
replicas see: the counters and budgets are rows, not process memory.
"""

from __future__ import annotations

import asyncio
import dataclasses

from agent import ModelCharge, Route, Task
from storage.admission import Admission, EarlierMessage, Limits, admit, before_downloads
from storage.database import Database
from storage.usage import PostgresUsageMeter, tokens_today

NOTICES = Limits(
    notices={
        "user": "user notice",
        "thread": "thread notice",
        "user_tokens": "user tokens notice",
        "channel_tokens": "channel tokens notice",
    }
)


def charge(input_tokens: int, output_tokens: int) -> ModelCharge:
    """A response of a model the price table does not know (no cost)."""
    return ModelCharge(Route("openai", "unpriced"), input_tokens, output_tokens)


def message(
    ts: str,
    *,
    user: str = "T1:U1",
    channel: str = "C1",
    thread: str | None = None,
    event: bool = True,
) -> Admission:
    session = f"T1:{channel}:{thread or ts}"
    return Admission(
        event_id=f"Ev{channel}{ts}" if event else None,
        task_id=f"T1:{channel}:{ts}",
        session_id=session,
        address={"channel": channel, "thread_ts": thread or ts},
        turn_text=f"turn {ts}",
        user=user,
        channel=f"T1:{channel}",
    )


def limits(**values: int) -> Limits:
    return dataclasses.replace(NOTICES, **values)


async def reply_of(db: Database, task_id: str) -> str | None:
    text = await db.pool.fetchval(
        "SELECT text FROM messages WHERE id = $1", f"task:{task_id}:reply"
    )
    return None if text is None else str(text)


async def has_task(db: Database, task_id: str) -> bool:
    return bool(await db.pool.fetchval("SELECT true FROM tasks WHERE id = $1", task_id))


async def test_a_user_past_the_hourly_limit_gets_one_notice_and_nothing_more(
    db: Database,
) -> None:
    rule = limits(user_messages_per_hour=2)
    outcomes = [
        await admit(db, message(ts, user="T1:UA", channel="CA"), rule)
        for ts in ("1.1", "1.2", "1.3", "1.4", "1.5")
    ]
    assert [bool(o) for o in outcomes] == [True, True, False, False, False]
    assert [o.limited for o in outcomes] == [None, None, "user", "user", "user"]
    assert [o.noticed for o in outcomes] == [False, False, True, False, False]
    # The noticed message is a task whose reply — the notice — is stored with it; the
    # later ones left no task, turn or session behind.
    assert await reply_of(db, "T1:CA:1.3") == "user notice"
    assert [await has_task(db, f"T1:CA:1.{n}") for n in (3, 4, 5)] == [True, False, False]
    assert not await db.pool.fetchval("SELECT true FROM sessions WHERE id = 'T1:CA:1.4'")
    # Another user is not affected.
    assert await admit(db, message("1.6", user="T1:UB", channel="CA"), rule)


async def test_a_thread_past_the_hourly_limit_is_closed_with_one_notice(db: Database) -> None:
    """The loop breaker: whoever writes, a thread takes so many messages an hour."""
    rule = limits(thread_messages_per_hour=3)
    outcomes = [
        await admit(db, message(f"2.{n}", user=f"T1:U{n % 2}", channel="CB", thread="2.0"), rule)
        for n in range(1, 7)
    ]
    assert [o.limited for o in outcomes] == [None, None, None, "thread", "thread", "thread"]
    assert [o.noticed for o in outcomes] == [False, False, False, True, False, False]
    assert await reply_of(db, "T1:CB:2.4") == "thread notice"
    # Another thread of the same channel goes on.
    assert await admit(db, message("2.9", channel="CB", thread="2.8"), rule)


async def test_a_redelivered_limited_event_is_a_duplicate_and_not_counted(db: Database) -> None:
    rule = limits(user_messages_per_hour=1)
    assert await admit(db, message("3.1", user="T1:UC", channel="CC"), rule)
    first = await admit(db, message("3.2", user="T1:UC", channel="CC"), rule)
    again = await admit(db, message("3.2", user="T1:UC", channel="CC"), rule)
    assert (first.limited, first.noticed) == ("user", True)
    assert (again.limited, again.noticed, bool(again)) == (None, False, False)
    count = await db.pool.fetchval(
        "SELECT messages FROM admission_counts WHERE scope = 'user' AND key = 'T1:UC'"
    )
    assert count == 2


async def test_concurrent_admissions_cannot_slip_past_the_limit(db: Database) -> None:
    """Forty messages of one user at once, over every connection of the pool (as replicas
    would): exactly the limit is admitted, and exactly one notice is claimed."""
    rule = limits(user_messages_per_hour=5)
    outcomes = await asyncio.gather(
        *(admit(db, message(f"4.{n}", user="T1:UD", channel="CD"), rule) for n in range(40))
    )
    assert sum(bool(o) for o in outcomes) == 5
    assert sum(o.noticed for o in outcomes) == 1
    assert await db.pool.fetchval("SELECT count(*) FROM tasks WHERE user_id = 'T1:UD'") == 6


async def test_the_meter_counts_requests_per_task_and_tokens_per_user_and_channel(
    db: Database,
) -> None:
    assert await admit(db, message("5.1", user="T1:UE", channel="CE"))
    assert await admit(db, message("5.2", user="T1:UE", channel="CE"))
    meter = PostgresUsageMeter(db)
    first, second = Task("T1:CE:5.1", "T1:CE:5.1", {}), Task("T1:CE:5.2", "T1:CE:5.2", {})
    assert await meter.record(first, charge(100, 10)) == 1
    assert await meter.record(first, charge(200, 20)) == 2
    assert await meter.record(second, charge(1000, 100)) == 1
    rows = await db.pool.fetch(
        "SELECT scope, key, input_tokens, output_tokens FROM usage_daily"
        " WHERE key IN ('T1:UE', 'T1:CE') ORDER BY scope"
    )
    assert [tuple(r) for r in rows] == [
        ("channel", "T1:CE", 1300, 130),
        ("user", "T1:UE", 1300, 130),
    ]
    used_input, used_output = await tokens_today(db)
    assert used_input >= 1300 and used_output >= 130


async def test_a_user_over_the_daily_token_budget_gets_the_notice(db: Database) -> None:
    rule = limits(user_daily_tokens=1000, channel_daily_tokens=5000)
    assert await admit(db, message("6.1", user="T1:UF", channel="CF"), rule)
    await PostgresUsageMeter(db).record(Task("T1:CF:6.1", "T1:CF:6.1", {}), charge(900, 100))
    over = await admit(db, message("6.2", user="T1:UF", channel="CF"), rule)
    later = await admit(db, message("6.3", user="T1:UF", channel="CF"), rule)
    assert (over.limited, over.noticed, bool(over)) == ("user_tokens", True, False)
    assert (later.limited, later.noticed) == ("user_tokens", False)
    assert await reply_of(db, "T1:CF:6.2") == "user tokens notice"
    # Someone else in the channel is still answered: the channel has budget left.
    assert await admit(db, message("6.4", user="T1:UG", channel="CF"), rule)


async def test_a_channel_over_its_daily_token_budget_refuses_everyone(db: Database) -> None:
    rule = limits(user_daily_tokens=10_000, channel_daily_tokens=1000)
    assert await admit(db, message("7.1", user="T1:UH", channel="CG"), rule)
    await PostgresUsageMeter(db).record(Task("T1:CG:7.1", "T1:CG:7.1", {}), charge(1000, 0))
    outcome = await admit(db, message("7.2", user="T1:UI", channel="CG"), rule)
    assert (outcome.limited, outcome.noticed) == ("channel_tokens", True)
    assert await reply_of(db, "T1:CG:7.2") == "channel tokens notice"


async def test_zero_means_no_limit(db: Database) -> None:
    rule = limits(user_messages_per_hour=0, thread_messages_per_hour=0)
    outcomes = [
        await admit(db, message(f"8.{n}", user="T1:UJ", channel="CH", thread="8.0"), rule)
        for n in range(1, 6)
    ]
    assert all(outcomes)


async def test_a_limited_first_mention_inside_a_thread_stores_no_backfill(db: Database) -> None:
    """The back-filling admission keeps the same limits; a notice task needs no history."""
    rule = limits(user_messages_per_hour=1)
    assert await admit(db, message("9.1", user="T1:UK", channel="CI"), rule)
    earlier = (EarlierMessage("slack:T1:CI:9.2", "earlier"),)
    a = message("9.3", user="T1:UK", channel="CI", thread="9.2")
    b = message("9.4", user="T1:UK", channel="CI", thread="9.2")
    first = await admit(db, dataclasses.replace(a, earlier=earlier), rule)
    second = await admit(db, dataclasses.replace(b, earlier=earlier), rule)
    assert (first.limited, first.noticed, second.limited, second.noticed) == (
        "user",
        True,
        "user",
        False,
    )
    assert await reply_of(db, "T1:CI:9.3") == "user notice"
    assert not await db.pool.fetchval("SELECT true FROM messages WHERE id = 'slack:T1:CI:9.2'")
    assert not await has_task(db, "T1:CI:9.4")


async def test_the_look_before_downloads_says_what_admission_then_does(fresh_db: Database) -> None:
    """`before_downloads` names the limit exactly when the admission that follows is
    refused by it, for the user and the thread limits, and sees a stored task."""
    rule = limits(user_messages_per_hour=2, thread_messages_per_hour=3)
    for n, (user, thread) in enumerate([("UA", "9.0")] * 3 + [("UB", "9.0")] * 2 + [("UB", None)]):
        admission = message(f"9.{n + 1}", user=f"T1:{user}", channel="CD", thread=thread)
        before = await before_downloads(fresh_db, admission, rule)
        outcome = await admit(fresh_db, admission, rule)
        assert before.limited == outcome.limited and not before.has_task
        assert (await before_downloads(fresh_db, admission, rule)).has_task == bool(
            outcome or outcome.noticed
        )
