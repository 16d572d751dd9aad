"""Admission: the turn, the session and the task become durable together, once."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent import Image, RuntimeNote, recur_every
from storage.admission import (
    Admission,
    EarlierMessage,
    Limits,
    _admit_in_steps,
    admit,
    admit_in_known_session,
    session_exists,
)
from storage.database import Database
from storage.schedules import NewSchedule, ScheduledRun, create_schedule, fire_schedule
from tests.pg import create_database


def admission(event_id: str | None, ts: str, text: str = "hello") -> Admission:
    return Admission(
        event_id=event_id,
        task_id=f"T1:C1:{ts}",
        session_id=f"T1:C1:{ts}",
        address={"channel": "C1", "thread_ts": ts},
        turn_text=text,
    )


async def test_first_delivery_is_admitted_with_its_turn_and_task(db: Database) -> None:
    """A new event stores the user turn under its deterministic id and queues a task."""
    assert await admit(db, admission("Ev1", "100.1", "hi there"))
    turn = await db.pool.fetchval("SELECT text FROM messages WHERE id = 'task:T1:C1:100.1:user'")
    state = await db.pool.fetchval("SELECT state FROM tasks WHERE id = 'T1:C1:100.1'")
    assert (turn, state) == ("hi there", "queued")


async def test_redelivered_event_is_not_admitted_twice(db: Database) -> None:
    """The same event id admits nothing the second time."""
    assert await admit(db, admission("Ev2", "100.2"))
    assert not await admit(db, admission("Ev2", "100.2"))
    assert await db.pool.fetchval("SELECT count(*) FROM tasks WHERE id = 'T1:C1:100.2'") == 1


async def test_second_event_for_the_same_message_is_not_admitted(db: Database) -> None:
    """`message` and `app_mention` for one Slack message give one task."""
    assert await admit(db, admission("Ev3a", "100.3"))
    assert not await admit(db, admission("Ev3b", "100.3"))
    count = await db.pool.fetchval("SELECT count(*) FROM messages WHERE session_id = 'T1:C1:100.3'")
    assert count == 1


async def test_earlier_thread_messages_are_stored_before_the_turn(db: Database) -> None:
    """Back-filled messages precede the turn in the session."""
    a = admission("Ev4", "100.4", "summarize")
    earlier = (EarlierMessage("slack:C1:99.1", "first"), EarlierMessage("slack:C1:99.2", "second"))
    assert await admit(db, dataclasses.replace(a, earlier=earlier))
    rows = await db.pool.fetch(
        "SELECT text FROM messages WHERE session_id = $1 ORDER BY seq", a.session_id
    )
    assert [r["text"] for r in rows] == ["first", "second", "summarize"]


async def test_a_long_back_fill_is_stored_in_its_order_with_the_turns_note(db: Database) -> None:
    """Twenty back-filled messages (stored in one statement) precede the turn in their
    order, a message stored before is left as it was, and only the turn carries its note."""
    a = admission("Ev5", "100.5", "and now?")
    await admit(db, dataclasses.replace(admission("Ev0", "100.5", "x"), task_id="T1:C1:100.0"))
    earlier = tuple(EarlierMessage(f"slack:C1:98.{n:02}", f"m{n}") for n in range(20))
    note = RuntimeNote("context_gap", "3 earlier messages could not be read")
    assert await admit(db, dataclasses.replace(a, earlier=earlier, note=note))
    again = (EarlierMessage("slack:C1:98.00", "changed"), EarlierMessage("slack:C1:98.99", "new"))
    second = dataclasses.replace(admission("Ev6", "100.6", "more"), session_id=a.session_id)
    assert await admit(db, dataclasses.replace(second, earlier=again))
    rows = await db.pool.fetch(
        "SELECT text, notes FROM messages WHERE session_id = $1 AND role = 'user' ORDER BY seq",
        a.session_id,
    )
    texts = [r["text"] for r in rows]
    assert texts == ["x", *(f"m{n}" for n in range(20)), "and now?", "new", "more"]
    assert [r["notes"] is not None for r in rows] == [t == "and now?" for t in texts]


# What admission writes, table by table; the back-filled messages are left out, since
# only the back-filling admission has them.
_WRITTEN = {
    "seen_events": "SELECT * FROM seen_events",
    # The thread's picture counter less the back-filled messages' pictures.
    "sessions": "SELECT s.*, s.picture_bytes - (SELECT coalesce(sum(octet_length(a.data)), 0)"
    " FROM message_attachments a JOIN messages m ON m.id = a.message_id"
    " WHERE m.session_id = s.id AND m.id LIKE 'slack:%') AS picture_bytes FROM sessions s",
    "tasks": "SELECT * FROM tasks",
    "messages": "SELECT m.*, a.id AS anchor_id FROM messages m"
    " JOIN messages a ON a.seq = m.anchor WHERE m.id NOT LIKE 'slack:%'",
    "message_attachments": "SELECT * FROM message_attachments WHERE message_id NOT LIKE 'slack:%'",
    "admission_counts": "SELECT * FROM admission_counts",
    "limit_notices": "SELECT * FROM limit_notices",
    "task_action_tokens": "SELECT * FROM task_action_tokens",
}


async def written_rows(db: Database) -> dict[str, list[dict[str, Any]]]:
    """Every row admission wrote, without what differs by when (times) or by how many
    messages came before (sequence numbers; a message's anchor is named by its id)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for table, query in _WRITTEN.items():
        found = [
            {
                k: v
                for k, v in dict(r).items()
                if k not in ("seq", "anchor") and not isinstance(v, datetime.date)
            }
            for r in await db.pool.fetch(query)
        ]
        rows[table] = sorted(found, key=repr)
    return rows


@pytest.fixture
async def twins(postgres_dsn: str, request: pytest.FixtureRequest) -> AsyncIterator[list[Database]]:
    """Two migrated databases of this test's own."""
    async with (
        Database(await create_database(postgres_dsn, f"{request.node.name}_1")) as one,
        Database(await create_database(postgres_dsn, f"{request.node.name}_2")) as two,
    ):
        await one.migrate()
        await two.migrate()
        yield [one, two]


def thread_opening(event_id: str | None, ts: str) -> Admission:
    """The first message of thread `ts`, from user U1, with an action token."""
    return Admission(
        event_id=event_id,
        task_id=f"T1:C1:{ts}",
        session_id=f"T1:C1:{ts}",
        address={"channel": "C1", "thread_ts": ts},
        turn_text=f"turn {ts}",
        user="T1:U1",
        channel="T1:C1",
        action_token=f"{event_id}.action",
    )


async def test_the_back_filling_admission_writes_what_the_one_statement_writes(
    twins: list[Database],
) -> None:
    """Admitted with back-filled messages (statement by statement) or without (one
    statement), the same messages give the same outcomes and the same rows: turns,
    pictures, tasks, deliveries, counters and the limit notice."""
    rule = Limits(user_messages_per_hour=2, notices={"user": "user notice"})
    picture = (Image("image/png", b"png bytes", "a.png"),)
    script = [
        ("Ev1", "1.1", picture),  # admitted, with a picture
        ("Ev1", "1.1", picture),  # the same delivery again: nothing
        ("Ev1b", "1.1", ()),  # the other event for the same message: nothing
        ("Ev2", "1.2", ()),  # admitted: the user's second message this hour
        ("Ev3", "1.3", picture),  # over the limit, the first: the notice task
        ("Ev4", "1.4", ()),  # over the limit again: nothing
        (None, "1.5", ()),  # no event id, still over the limit: nothing
    ]
    fast, backfilled = twins
    for event_id, ts, images in script:
        # The second event's token is not kept.
        a = dataclasses.replace(thread_opening(event_id, ts), images=images)
        earlier = (EarlierMessage(f"slack:C1:{ts}:0", "before", picture),)
        one = await admit(fast, a, rule)
        other = await admit(backfilled, dataclasses.replace(a, earlier=earlier), rule)
        assert (one, one.limited, one.noticed) == (other, other.limited, other.noticed)
    rows = await written_rows(fast)
    assert len(rows["tasks"]) == 3 and rows["limit_notices"] != []  # every outcome came
    assert {r["token"] for r in rows["task_action_tokens"]} == {f"Ev{n}.action" for n in (1, 2, 3)}
    assert rows == await written_rows(backfilled)


async def test_a_back_fill_without_pictures_takes_the_one_statement_and_writes_the_same(
    twins: list[Database],
) -> None:
    """A thread's first mention with its earlier messages and a note after it (a channel's
    context), and no picture, is admitted in one statement (`admit_thread_turn`, migration
    034); it writes what the statement-by-statement admission writes, back-filled messages,
    their order and the turn's note included, for every outcome (a limit's notice task
    keeps no back-fill: no model reads it)."""
    rule = Limits(user_messages_per_hour=2, notices={"user": "user notice"})
    one_statement, in_steps = twins
    for event_id, ts in (
        ("Ev1", "2.1"),
        ("Ev1", "2.1"),
        ("Ev2", "2.2"),
        ("Ev3", "2.3"),
        ("Ev4", "2.4"),
    ):
        a = dataclasses.replace(
            thread_opening(event_id, ts),
            earlier=tuple(EarlierMessage(f"slack:C1:{ts}:{n}", f"before {n}") for n in range(3)),
            note=RuntimeNote("channel_context", "3 messages shown for context"),
        )
        once = await admit(one_statement, a, rule)
        steps = await _admit_in_steps(in_steps, a, rule)
        assert (once, once.limited, once.noticed) == (steps, steps.limited, steps.noticed)
    rows = await written_rows(one_statement)
    assert len(rows["tasks"]) == 3 and rows["limit_notices"] != []
    assert [m["notes"] is not None for m in rows["messages"] if m["role"] == "user"] == [True] * 3
    assert rows == await written_rows(in_steps)
    every = "SELECT session_id, id, text FROM messages ORDER BY seq"
    stored = [tuple(r) for r in await one_statement.pool.fetch(every)]
    assert ("T1:C1:2.1", "slack:C1:2.1:2", "before 2") in stored
    assert not [m for m in stored if m[0] == "T1:C1:2.3" and m[1].startswith("slack:")]
    assert stored == [tuple(r) for r in await in_steps.pool.fetch(every)]


async def test_admission_commits_while_every_work_connection_is_lent(fresh_dsn: str) -> None:
    """With connections kept for it, an admission commits while reply work holds every
    connection of the work pool (and takes a work connection while one is free)."""
    async with Database(fresh_dsn, min_size=1, max_size=1, admission_size=1) as db:
        assert db.admissions is db.pool  # a work connection is free: it is taken first
        async with db.pool.acquire():  # reply work holds the only work connection
            assert db.pool.lent == db.pool.max_size
            assert db.admissions is not db.pool
            assert await admit(db, admission("Ev9", "100.9"))
            assert await session_exists(db, "T1:C1:100.9")
            async with db.admissions.acquire():  # and an admission holds the kept one
                assert db.admissions is db.pool  # the next waits in the work pool's line
        assert await db.pool.fetchval("SELECT state FROM tasks WHERE id = 'T1:C1:100.9'")


async def test_in_a_known_session_it_writes_what_admit_writes(twins: list[Database]) -> None:
    """Admitted only in a session that exists, a message gets the outcomes and rows
    `admit` gives it there; in a session new to us nothing is written, not even the
    delivery, so its admission after the back-fill still counts it."""
    rule = Limits(user_messages_per_hour=2, notices={"user": "user notice"})
    script = ["Ev1", "Ev1", "Ev2", "Ev3", "Ev4", None]  # a repeat, then over the limit
    plain, known = twins
    for db in twins:  # the thread's first message, in both
        assert await admit(db, thread_message("Ev0", "1.0"), rule)
    for n, event_id in enumerate(script, start=1):
        a = thread_message(event_id, f"1.{n}")
        one = await admit(plain, a, rule)
        other = await admit_in_known_session(known, a, rule)
        assert other is not None
        assert (one, one.limited, one.noticed) == (other, other.limited, other.noticed)
    assert await written_rows(plain) == await written_rows(known)
    new = dataclasses.replace(thread_message("Ev9", "2.1"), session_id="T1:C1:2.0")
    before = await written_rows(known)
    assert await admit_in_known_session(known, new) is None
    assert await written_rows(known) == before
    assert await admit(known, new)


def thread_message(event_id: str | None, ts: str) -> Admission:
    """A reply in thread 1.0 (its own task, the thread's session)."""
    return Admission(
        event_id=event_id,
        task_id=f"T1:C1:{ts}",
        session_id="T1:C1:1.0",
        address={"channel": "C1", "thread_ts": "1.0"},
        turn_text=f"turn {ts}",
        user="T1:U1",
        channel="T1:C1",
    )


async def test_a_schedules_run_writes_what_admit_writes(twins: list[Database]) -> None:
    """A schedule's run stores its session, task and turn as admission stores a person's
    message with that task, conversation, address and turn (the delivery aside: a run
    has none; and the run names its schedule)."""
    admitted, scheduled = twins
    schedule = await create_schedule(
        scheduled,
        NewSchedule(
            team="T1",
            target="channel",
            prompt="digest",
            recurrence=recur_every("10s"),
            created_by="test",
            channel="C1",
            owner="T1:U1",
        ),
    )
    await scheduled.pool.execute(
        "UPDATE schedules SET next_run_at = now() - interval '1 second' WHERE id = $1",
        int(schedule.id),
    )
    run = ScheduledRun(
        "T1:C1:schedule", {"team": "T1", "channel": "C1", "thread_ts": ""}, "run", "T1:C1"
    )
    fired = await fire_schedule(scheduled, schedule.id, lambda s, p: run, late_seconds=60)
    assert fired is not None and fired.created and fired.task_id is not None
    a = Admission(
        event_id=None,
        task_id=fired.task_id,
        session_id=run.session_id,
        address=run.address,
        turn_text=run.turn_text,
        user="T1:U1",
        channel=run.channel,
    )
    assert await admit(admitted, a)
    await admitted.pool.execute("UPDATE tasks SET schedule_id = $1", int(schedule.id))
    assert await written_rows(admitted) == await written_rows(scheduled)
