"""Admission: the turn, the session and the task become durable together, once."""

from __future__ import annotations

import dataclasses

from storage import Admission, Database, EarlierMessage, admit


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
