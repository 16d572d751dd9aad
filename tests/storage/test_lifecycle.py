"""Stored turns after the fact: edits move forward only, deletions leave a tombstone and
cancel a task that has not started, and a redelivered event changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent import Task
from storage import (
    TOMBSTONE,
    Admission,
    Database,
    PostgresHistory,
    PostgresTaskQueue,
    admit,
    delete_turn,
    revise_turn,
    stored_turn,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def turn(db: Database, ts: str) -> tuple[str, str]:
    task_id = f"T1:C1:{ts}"
    assert await admit(db, Admission(None, task_id, task_id, {"channel": "C1"}, "original"))
    return task_id, f"task:{task_id}:user"


async def text_of(db: Database, message_id: str) -> str:
    return str(await db.pool.fetchval("SELECT text FROM messages WHERE id = $1", message_id))


async def test_an_edit_replaces_the_text_once_and_never_goes_back(fresh_db: Database) -> None:
    """The newer edit wins whatever the order they arrive in; a redelivery is a no-op."""
    _, message = await turn(fresh_db, "1.0")
    assert await stored_turn(fresh_db, ["nothing", message]) == message
    newer, older = T0 + timedelta(minutes=2), T0 + timedelta(minutes=1)
    assert await revise_turn(
        fresh_db, event_id="E1", message_id=message, text="v2", edited_at=newer
    )
    assert not await revise_turn(
        fresh_db, event_id="E1", message_id=message, text="v2!", edited_at=newer + timedelta(1)
    )
    assert not await revise_turn(
        fresh_db, event_id="E0", message_id=message, text="v1", edited_at=older
    )
    assert await text_of(fresh_db, message) == "v2"


async def test_a_deletion_cancels_a_queued_task_and_blanks_its_turn(fresh_db: Database) -> None:
    """The turn's words are gone and the window shows the tombstone note in their place;
    the queued task is cancelled by Slack's deletion."""
    task_id, message = await turn(fresh_db, "2.0")
    deleted = await delete_turn(fresh_db, event_id="E2", message_ids=[message], task_id=task_id)
    assert deleted is not None and (deleted.turns, deleted.cancelled) == (1, True)
    assert await text_of(fresh_db, message) == ""  # the tombstone is a note, not their words
    task = Task(task_id, task_id, {"channel": "C1"})
    [buried] = await PostgresHistory(fresh_db).window(task, max_chars=1000, max_messages=10)
    assert (buried.text, buried.notes) == ("", (TOMBSTONE,))
    assert await stored_turn(fresh_db, [message]) is None
    assert (
        await delete_turn(fresh_db, event_id="E2", message_ids=[message], task_id=task_id) is None
    )
    actor = await fresh_db.pool.fetchval(
        "SELECT actor FROM task_interventions WHERE task_id = $1", task_id
    )
    assert actor == "slack:message_deleted"


async def test_a_running_task_is_left_to_finish(fresh_db: Database) -> None:
    """Deleting the turn of a task that already started blanks it but cancels nothing."""
    task_id, message = await turn(fresh_db, "3.0")
    claimed = await PostgresTaskQueue(fresh_db).claim()
    assert claimed is not None and claimed.id == task_id
    deleted = await delete_turn(fresh_db, event_id=None, message_ids=[message], task_id=task_id)
    assert deleted is not None and (deleted.turns, deleted.cancelled) == (1, False)
    assert (
        await fresh_db.pool.fetchval("SELECT state FROM tasks WHERE id = $1", task_id) == "running"
    )
