"""Erasure: an uninstalled workspace's stored content goes, all of it and only it, in
bounded batches, once however many replicas and deliveries ask."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from storage import (
    Database,
    Erasure,
    PostgresInstallations,
    StoredInstallation,
    pending_erasures,
    request_erasure,
    uninstall_seen,
)
from storage.erasure import KEPT, WORKSPACE_TABLES
from storage.retention import TASK_ROWS
from tests.storage.test_retention import task

NOW = timedelta(0)


async def workspace(db: Database, team: str) -> set[str]:
    """A workspace's stored content: two finished tasks and an unfinished one (with every
    row of a task), a back-filled message, its usage, budgets, counters and prompt epochs;
    the ids of its sessions."""
    sessions = {
        await task(db, "done", state="done", age_days=0, team=team),
        await task(db, "cancelled", state="cancelled", age_days=0, team=team),
        await task(db, "running", state="running", age_days=0, team=team),
    }
    first = min(sessions)
    await db.pool.execute(
        "INSERT INTO messages (id, session_id, anchor, role, kind, text, provenance) "
        "VALUES ($1, $2, 0, 'user', 'turn', 'said earlier', 'backfill')",
        f"{first}:earlier",
        first,
    )
    await db.pool.execute(
        "INSERT INTO model_usage (task_id, workspace, channel, user_id, provider, model, slot,"
        " input_tokens, output_tokens) VALUES ($1, $2, $3, $4, 'openai', 'm', 0, 1, 1)",
        f"{team}:gone-task",
        team,
        f"{team}:C1",
        f"{team}:U1",
    )
    for scope, key in (("user", f"{team}:U1"), ("channel", f"{team}:C1"), ("workspace", team)):
        await db.pool.execute(
            "INSERT INTO usage_daily (day, scope, key) VALUES (current_date, $1, $2)", scope, key
        )
    await db.pool.execute(
        "INSERT INTO admission_counts (scope, key, window_start, messages) "
        "VALUES ('user', $1, date_trunc('hour', now(), 'UTC'), 1)",
        f"{team}:U1",
    )
    await db.pool.execute(
        "INSERT INTO picture_days (workspace, day, bytes) VALUES ($1, current_date, 5)", team
    )
    await db.pool.execute(
        "INSERT INTO prompt_epochs (hash, version, text) VALUES ('h', 'v', 'p') "
        "ON CONFLICT DO NOTHING"
    )
    await db.pool.execute(
        "INSERT INTO session_epochs (session_id, number, epoch, reason) VALUES ($1, 1, 'h', 'start')",
        first,
    )
    return sessions


# Every column that can name a workspace's row: its key, a session, a task or a message.
_COLUMNS = """
SELECT table_name, column_name FROM information_schema.columns
WHERE table_schema = current_schema()
  AND column_name IN ('session_id', 'task_id', 'message_id', 'workspace', 'key', 'team',
                      'team_id')
   OR (table_schema = current_schema() AND column_name = 'id'
       AND table_name IN ('tasks', 'messages', 'sessions'))
"""


async def rows_of(db: Database, team: str) -> dict[str, int]:
    """How many rows of any table name `team`'s workspace, by table and column."""
    found = {}
    for row in await db.pool.fetch(_COLUMNS):
        table, column = row["table_name"], row["column_name"]
        if table in KEPT:
            continue
        count = await db.pool.fetchval(
            f"SELECT count(*) FROM {table} WHERE {column}::text = $1 "
            f"OR starts_with({column}::text, $1 || ':') "
            f"OR starts_with({column}::text, 'task:' || $1 || ':')",
            team,
        )
        if count:
            found[f"{table}.{column}"] = count
    return found


async def test_an_erasure_leaves_nothing_of_its_workspace_and_all_of_the_others(
    fresh_db: Database,
) -> None:
    """Every row naming the erased workspace — tasks with their rows, messages with their
    pictures, summaries, sessions, usage, budgets, counters — goes, in batches smaller
    than the work; the other workspace keeps every row, and the request is gone."""
    db = fresh_db
    await workspace(db, "T1")
    await workspace(db, "T2")
    kept = await rows_of(db, "T2")
    assert await rows_of(db, "T1") == {k.replace("T2", "T1"): v for k, v in kept.items()}
    assert await request_erasure(db, "T1", reason="uninstalled", event_id="Ev1")
    counted: dict[str, int] = {}
    run = await Erasure(db, settle=NOW, batch=2, on_deleted=counted.__setitem__).run("T1")
    assert run is not None and counted == run.deleted
    assert await rows_of(db, "T1") == {}
    assert await rows_of(db, "T2") == kept
    # Two messages a task (its turn and reply) and the back-filled one.
    assert run.deleted["tasks"] == 3 and run.deleted["messages"] == 3 * 2 + 1
    assert await pending_erasures(db) == []


async def test_an_erasure_waits_until_it_is_settled(fresh_db: Database) -> None:
    """Before its settle time a run deletes nothing and the request stays; after it, it runs."""
    db = fresh_db
    await workspace(db, "T1")
    before = await rows_of(db, "T1")
    await request_erasure(db, "T1", reason="uninstalled")
    assert await Erasure(db, settle=timedelta(hours=1)).run("T1") is None
    assert await rows_of(db, "T1") == before
    assert [p.workspace for p in await pending_erasures(db)] == ["T1"]
    assert await Erasure(db, settle=NOW).sweep() == 0
    assert await rows_of(db, "T1") == {}


async def test_a_redelivered_uninstall_requests_nothing(fresh_db: Database) -> None:
    """The same delivery twice: the first requests the erasure and marks it seen; the
    second is seen and requests nothing, not even after the first erasure ended."""
    db = fresh_db
    assert not await uninstall_seen(db, "Ev1")
    assert await request_erasure(db, "T1", reason="uninstalled", event_id="Ev1")
    assert await uninstall_seen(db, "Ev1")
    await Erasure(db, settle=NOW).run("T1")
    assert not await request_erasure(db, "T1", reason="uninstalled", event_id="Ev1")
    assert await pending_erasures(db) == []


async def test_replicas_erasing_at_once_erase_once(fresh_db: Database) -> None:
    """Three runs at once: one erases everything, the others find it held or done."""
    db = fresh_db
    await workspace(db, "T1")
    await request_erasure(db, "T1", reason="uninstalled")
    runs = await asyncio.gather(*(Erasure(db, settle=NOW, batch=1).run("T1") for _ in range(3)))
    done = [run for run in runs if run is not None]
    assert len(done) == 1 and done[0].deleted["tasks"] == 3
    assert await rows_of(db, "T1") == {}


async def test_a_reinstall_finishes_the_pending_erasure_before_it_is_stored(
    fresh_db: Database,
) -> None:
    """An install of a workspace whose erasure is pending (not even settled) erases the
    old content first, then stores the installation: nothing new is erased with it."""
    db = fresh_db
    await workspace(db, "T1")
    await request_erasure(db, "T1", reason="uninstalled")
    installations = PostgresInstallations(db, "client")
    await installations.save(StoredInstallation("client", None, "T1", "xoxb-new"))
    assert await rows_of(db, "T1") == {}
    assert await pending_erasures(db) == []
    found = await installations.find(None, "T1")
    assert found is not None and found.bot_token == "xoxb-new"


# The tables whose columns say which workspace a row is of.
_WORKSPACE_COLUMNS = """
SELECT DISTINCT table_name FROM information_schema.columns
WHERE table_schema = current_schema()
  AND column_name IN ('team', 'team_id', 'workspace', 'workspace_id', 'enterprise',
                      'enterprise_id', 'session_id')
"""
# The tables with a task's id, and whether a foreign key deletes their rows with it.
_TASK_COLUMNS = """
SELECT c.table_name, EXISTS (
    SELECT 1 FROM pg_constraint k
    WHERE k.conrelid = (current_schema() || '.' || c.table_name)::regclass
      AND k.contype = 'f' AND k.confdeltype = 'c') AS cascades
FROM information_schema.columns c
WHERE c.table_schema = current_schema() AND c.column_name = 'task_id'
"""


async def test_every_table_of_a_workspace_is_erased_or_kept_on_purpose(db: Database) -> None:
    """Each table with a team, workspace, enterprise or session column (read from the
    catalog: tables added later included) is in `WORKSPACE_TABLES` or in `KEPT` with a
    reason; each with a task id is deleted with its task (`TASK_ROWS`) or cascades."""
    with_tasks = {table for table, _ in TASK_ROWS}
    erased = {scoped.table for scoped in WORKSPACE_TABLES} | with_tasks
    assert not erased & set(KEPT)
    tables = {row["table_name"] for row in await db.pool.fetch(_WORKSPACE_COLUMNS)}
    assert tables >= {"messages", "summaries", "slack_installations", "model_usage"}
    assert sorted(tables - erased - set(KEPT)) == []
    loose = [
        row["table_name"]
        for row in await db.pool.fetch(_TASK_COLUMNS)
        if row["table_name"] not in with_tasks and not row["cascades"]
    ]
    assert loose == []
