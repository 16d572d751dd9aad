"""A task's action token: kept with the task it came with, only while that task lives."""

from __future__ import annotations

import dataclasses

from storage import (
    Admission,
    Database,
    EarlierMessage,
    PostgresActionTokens,
    PostgresTaskQueue,
    admit,
    admit_in_known_session,
    cancel_task,
    inspect_task,
)
from storage.admission import Admission as AdmissionType

TOKEN = "1700000000.000100.U0A1B2C3D4E.3b1f0c9ad2e4"


def message(ts: str, token: str | None = TOKEN, *, thread: str | None = None) -> Admission:
    return Admission(
        event_id=f"Ev{ts}",
        task_id=f"T1:C1:{ts}",
        session_id=f"T1:C1:{thread or ts}",
        address={"team": "T1", "channel": "C1", "thread_ts": thread or ts},
        turn_text="<turn>what did we decide?</turn>",
        action_token=token,
    )


async def test_the_one_statement_admission_keeps_the_token_with_its_task(
    fresh_db: Database,
) -> None:
    """A message admitted at once leaves its token readable by whichever worker runs it."""
    assert await admit(fresh_db, message("1.1"))
    assert await PostgresActionTokens(fresh_db).token_of("T1:C1:1.1") == TOKEN


async def test_the_admission_in_steps_and_in_a_known_session_keep_it_too(
    fresh_db: Database,
) -> None:
    """Back-filled (statement by statement) or in a thread we know, the token is kept."""
    backfilled = dataclasses.replace(
        message("2.1"), earlier=(EarlierMessage("slack:T1:C1:2.0", "before"),)
    )
    assert await admit(fresh_db, backfilled)
    in_thread = message("2.2", "second.token", thread="2.1")
    assert await admit_in_known_session(fresh_db, in_thread)
    tokens = PostgresActionTokens(fresh_db)
    assert await tokens.token_of("T1:C1:2.1") == TOKEN
    assert await tokens.token_of("T1:C1:2.2") == "second.token"


async def test_a_second_event_for_the_same_message_keeps_the_first_token(
    fresh_db: Database,
) -> None:
    """Slack's `message` and `app_mention` of one mention admit one task, one token."""
    assert await admit(fresh_db, message("3.1"))
    other = dataclasses.replace(message("3.1", "other.token"), event_id="Ev3.1b")
    assert not await admit(fresh_db, other)
    assert await PostgresActionTokens(fresh_db).token_of("T1:C1:3.1") == TOKEN
    assert await fresh_db.pool.fetchval("SELECT count(*) FROM task_action_tokens") == 1


async def test_a_message_without_one_keeps_nothing(fresh_db: Database) -> None:
    """No token in the event (an edit's mention, an old payload): no row, None."""
    assert await admit(fresh_db, message("4.1", None))
    assert await PostgresActionTokens(fresh_db).token_of("T1:C1:4.1") is None
    assert await fresh_db.pool.fetchval("SELECT count(*) FROM task_action_tokens") == 0


async def test_the_token_goes_when_its_task_ends(fresh_db: Database) -> None:
    """Finished by its worker, or cancelled by an operator: the token is deleted with the
    state change, and the task view never shows it."""
    queue = PostgresTaskQueue(fresh_db)
    assert await admit(fresh_db, message("5.1"))
    assert await admit(fresh_db, message("5.2"))
    claimed = await queue.claim()
    assert claimed is not None and claimed.id == "T1:C1:5.1"
    assert TOKEN not in repr(await inspect_task(fresh_db, claimed.id))
    await queue.finish(claimed)
    await cancel_task(fresh_db, "T1:C1:5.2", actor="operator")
    tokens = PostgresActionTokens(fresh_db)
    assert await tokens.token_of("T1:C1:5.1") is None
    assert await tokens.token_of("T1:C1:5.2") is None
    assert await fresh_db.pool.fetchval("SELECT count(*) FROM task_action_tokens") == 0


async def test_the_token_goes_with_its_task_row(fresh_db: Database) -> None:
    """Whatever deletes a task (retention, an uninstall) deletes its token with it."""
    assert await admit(fresh_db, message("6.1"))
    async with fresh_db.pool.acquire() as conn, conn.transaction():
        await conn.execute("DELETE FROM messages WHERE session_id = 'T1:C1:6.1'")
        await conn.execute("DELETE FROM tasks WHERE id = 'T1:C1:6.1'")
    assert await fresh_db.pool.fetchval("SELECT count(*) FROM task_action_tokens") == 0


def test_an_admission_never_shows_its_token() -> None:
    """The token is a credential: an admission's repr (a log line, a traceback) omits it."""
    assert TOKEN not in repr(message("7.1"))
    assert "action_token" not in repr(AdmissionType(None, "t", "s", {}, "", action_token=TOKEN))
