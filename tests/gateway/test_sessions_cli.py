"""`threadgate sessions delete` and `clear`, through the real command line: a deleted
session leaves no row behind in any table, a cleared one keeps itself and its tasks, and
neither touches a session with an open task, nor another session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage import Database
from tests.gateway.process import run_cli_output
from tests.storage.test_retention import task

# The columns by which a row belongs to a task, a message or a thread, in any table.
_OWNER_COLUMNS = """
SELECT table_name, column_name FROM information_schema.columns
WHERE table_schema = current_schema()
  AND (column_name IN ('task_id', 'message_id', 'session_id')
       OR (column_name = 'id' AND table_name IN ('tasks', 'messages', 'sessions')))
ORDER BY table_name, column_name
"""


@pytest.fixture
async def db(fresh_dsn: str) -> AsyncIterator[Database]:
    async with Database(fresh_dsn) as database:
        yield database


async def sessions(dsn: str, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """`threadgate sessions ARGS` against the database at `dsn`."""
    return await run_cli_output(["sessions", *args], {"DATABASE_URL": dsn}, tmp_path)


async def rows_naming(db: Database, owners: set[str]) -> dict[str, int]:
    """Per `table.column`, the rows naming any of `owners` (those with none left out)."""
    found = {}
    for r in await db.pool.fetch(_OWNER_COLUMNS):
        column = f"{r['table_name']}.{r['column_name']}"
        found[column] = await db.pool.fetchval(
            f"SELECT count(*) FROM {r['table_name']} WHERE {r['column_name']} = ANY($1::text[])",
            list(owners),
        )
    return {column: n for column, n in found.items() if n}


def owned_by(task_id: str) -> set[str]:
    return {task_id, f"task:{task_id}:user", f"task:{task_id}:reply"}


async def with_epoch_and_vote(db: Database, session: str) -> None:
    """The session's rows that cascade: an epoch, and a vote on its reply."""
    await db.pool.execute(
        "INSERT INTO prompt_epochs (hash, version, text) VALUES ('h1', '3', 'prompt') "
        "ON CONFLICT DO NOTHING"
    )
    await db.pool.execute(
        "INSERT INTO session_epochs (session_id, number, epoch, reason) "
        "VALUES ($1, 1, 'h1', 'start')",
        session,
    )
    await db.pool.execute(
        "INSERT INTO reply_feedback (message_id, user_id, value) VALUES ($1, 'U1', 'positive')",
        f"task:{session}:reply",
    )


async def test_delete_removes_the_session_and_every_row_it_holds(
    db: Database, fresh_dsn: str, tmp_path: Path
) -> None:
    """After `sessions delete`, no column of any table names the session, its tasks or its
    messages (pictures, votes, epochs, outbox rows included); another session is intact."""
    gone = await task(db, "gone", state="done", age_days=1)
    kept = await task(db, "kept", state="done", age_days=1)
    for session in (gone, kept):
        await with_epoch_and_vote(db, session)
    assert await rows_naming(db, owned_by(gone))  # the fixture holds what is to go
    status, out, err = await sessions(fresh_dsn, tmp_path, "delete", gone)
    assert status == 0, err
    assert f"Session {gone} is deleted, with its 2 messages and 1 task" in out
    assert await rows_naming(db, owned_by(gone)) == {}
    assert not await db.pool.fetchval(
        "SELECT count(*) FROM outbox WHERE starts_with(id, $1)", f"task:{gone}:"
    )
    assert await db.pool.fetchval("SELECT count(*) FROM session_epochs") == 1
    left = await rows_naming(db, owned_by(kept))
    assert left["messages.id"] == 2 and left["reply_feedback.message_id"] == 1
    assert left["session_epochs.session_id"] == 1 and left["tasks.id"] == 1


async def test_clear_removes_the_history_and_keeps_the_session(
    db: Database, fresh_dsn: str, tmp_path: Path
) -> None:
    """`sessions clear` deletes messages, pictures and summaries, keeps the session, its
    epochs and tasks, and records who cleared it and why."""
    session = await task(db, "cleared", state="done", age_days=1)
    await with_epoch_and_vote(db, session)
    status, out, err = await sessions(
        fresh_dsn, tmp_path, "clear", session, "--reason", "fresh start"
    )
    assert status == 0, err
    assert f"Session {session} is cleared: 2 messages and 1 summaries deleted" in out
    left = await rows_naming(db, owned_by(session))
    assert "messages.id" not in left and "summaries.session_id" not in left
    assert "message_attachments.message_id" not in left
    assert left["sessions.id"] == 1 and left["tasks.id"] == 1
    assert left["session_epochs.session_id"] == 1
    audit = await db.pool.fetch(
        "SELECT action, reason FROM session_interventions WHERE session_id = $1 ORDER BY id",
        session,
    )
    assert [(a["action"], a["reason"]) for a in audit] == [
        ("reset", None),
        ("clear", "fresh start"),
    ]


@pytest.mark.parametrize("verb", ["delete", "clear"])
async def test_a_session_with_an_open_task_is_refused_in_one_sentence(
    db: Database, fresh_dsn: str, tmp_path: Path, verb: str
) -> None:
    """While a task of the session runs, both verbs refuse, say which task and what to do,
    exit 1 and change nothing."""
    session = await task(db, "busy", state="running", age_days=0)
    before = await rows_naming(db, owned_by(session))
    status, out, err = await sessions(fresh_dsn, tmp_path, verb, session)
    assert status == 1 and out == ""
    assert f"its task {session} is running; cancel it (`threadgate tasks cancel" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert await rows_naming(db, owned_by(session)) == before


async def test_an_unknown_session_is_one_sentence(
    db: Database, fresh_dsn: str, tmp_path: Path
) -> None:
    """An id no session has is one sentence and exit status 1."""
    status, _, err = await sessions(fresh_dsn, tmp_path, "delete", "T1:C1:nope")
    assert status == 1 and "No session has the id 'T1:C1:nope'" in err
