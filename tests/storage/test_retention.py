"""Retention: exactly what is past it goes, in bounded batches, one replica at a time."""

from __future__ import annotations

import json

from storage import Admission, Database, Retention, admit
from storage.retention import _LOCK_KEY

DAYS = 30


async def task(db: Database, name: str, *, state: str, age_days: int, team: str = "T1") -> str:
    """A task of workspace `team` with its turn, reply, outbox rows, a delegating round with
    a subtask, a tool call and an intervention, created (and finished, unless unfinished)
    `age_days` ago."""
    task_id = f"{team}:C1:{name}"
    assert await admit(db, Admission(None, task_id, task_id, {"channel": "C1"}, "hi"))
    ago = f"now() - interval '{age_days} days'"
    finished = ago if state in ("done", "failed", "cancelled") else "NULL"
    await db.pool.execute(
        f"UPDATE tasks SET state = $2, created_at = {ago}, finished_at = {finished} WHERE id = $1",
        task_id,
        state,
    )
    await db.pool.execute(
        "INSERT INTO messages (id, session_id, anchor, role, kind, text) "
        "SELECT $1, session_id, seq, 'assistant', 'reply', 'ok' FROM messages WHERE id = $2",
        f"task:{task_id}:reply",
        f"task:{task_id}:user",
    )
    await db.pool.execute(f"UPDATE messages SET created_at = {ago} WHERE session_id = $1", task_id)
    await db.pool.execute(f"UPDATE sessions SET created_at = {ago} WHERE id = $1", task_id)
    for post in (f"task:{task_id}:reply", f"task:{task_id}:reply#1", f"task:{task_id}:ack:0"):
        await db.pool.execute("INSERT INTO outbox (id, state) VALUES ($1, 'sent')", post)
    await db.pool.execute(
        "INSERT INTO task_rounds (task_id, number, call_id, raw_arguments, acknowledgment) "
        "VALUES ($1, 0, 'c', '{}', 'on it')",
        task_id,
    )
    await db.pool.execute(
        "INSERT INTO subtasks (task_id, round, index, type, params, deadline) "
        "VALUES ($1, 0, 0, 'agent', $2, now())",
        task_id,
        json.dumps({}),
    )
    await db.pool.execute(
        "INSERT INTO tool_calls (task_id, round, call_id, name, arguments, state) "
        "VALUES ($1, 0, 'k', 'x', '{}', 'ok')",
        task_id,
    )
    await db.pool.execute(
        "INSERT INTO task_interventions (task_id, action, actor, from_state) "
        "VALUES ($1, 'cancel', 'op', 'queued')",
        task_id,
    )
    # What memory and files keep about the conversation: a picture of the turn, a summary
    # of the thread, an operator's reset of its prompt.
    await db.pool.execute(
        "INSERT INTO message_attachments (message_id, ordinal, name, media_type, data) "
        "VALUES ($1, 0, 'a.png', 'image/png', '\\x89')",
        f"task:{task_id}:user",
    )
    await db.pool.execute(
        "INSERT INTO summaries (session_id, covers_from_seq, covers_to_seq, text, created_at) "
        f"VALUES ($1, 0, 1, 'they said hi', {ago})",
        task_id,
    )
    await db.pool.execute(
        "INSERT INTO session_interventions (session_id, action, actor) VALUES ($1, 'reset', 'op')",
        task_id,
    )
    return task_id


async def remaining(db: Database, table: str, column: str) -> set[str]:
    return {str(r[0]) for r in await db.pool.fetch(f"SELECT {column} FROM {table}")}


async def test_exactly_the_old_finished_tasks_and_their_rows_go(fresh_db: Database) -> None:
    """Old finished tasks go with every row of theirs; an old running task, an old queued
    one and fresh ones stay, with their threads — in batches smaller than the work."""
    db = fresh_db
    old = [
        await task(db, f"old{n}", state=s, age_days=40)
        for n, s in enumerate(("done", "failed", "cancelled"))
    ]
    running = await task(db, "running", state="running", age_days=40)
    queued = await task(db, "queued", state="queued", age_days=40)
    fresh = await task(db, "fresh", state="done", age_days=1)
    counted: dict[str, int] = {}
    run = await Retention(
        db, days=DAYS, batch=2, on_deleted=lambda t, n: counted.__setitem__(t, n)
    ).run()
    assert run is not None and counted == run.deleted
    kept = {running, queued, fresh}
    assert await remaining(db, "tasks", "id") == kept
    assert await remaining(db, "sessions", "id") == kept
    assert {
        m.split(":user")[0].split(":reply")[0][5:] for m in await remaining(db, "messages", "id")
    } == kept
    for table in ("task_rounds", "subtasks", "tool_calls", "task_interventions"):
        assert await remaining(db, table, "task_id") == kept, table
    for table in ("summaries", "session_interventions"):
        assert await remaining(db, table, "session_id") == kept, table
    pictures = await remaining(db, "message_attachments", "message_id")
    assert pictures == {f"task:{t}:user" for t in kept}
    assert len(await remaining(db, "outbox", "id")) == 3 * len(kept)
    assert run.deleted["tasks"] == len(old) and run.deleted["outbox"] == 3 * len(old)
    assert run.deleted["messages"] == 2 * len(old) and run.deleted["sessions"] == len(old)


# The columns by which a row belongs to a task, a message or a thread, in any table.
_OWNER_COLUMNS = """
SELECT table_name, column_name FROM information_schema.columns
WHERE table_schema = current_schema()
  AND (column_name IN ('task_id', 'message_id', 'session_id')
       OR (column_name = 'id' AND table_name IN ('tasks', 'messages', 'sessions')))
ORDER BY table_name, column_name
"""


async def test_no_table_keeps_a_row_of_what_retention_deleted(fresh_db: Database) -> None:
    """Every column naming a task, a message or a thread, in every table (those added
    later included), names none of an old finished task's once retention ran."""
    db = fresh_db
    old = await task(db, "old", state="done", age_days=40)
    owners = {old, f"task:{old}:user", f"task:{old}:reply"}
    await Retention(db, days=DAYS).run()
    columns = await db.pool.fetch(_OWNER_COLUMNS)
    assert {r["table_name"] for r in columns} >= {"message_attachments", "tool_calls"}
    left = {
        f"{r['table_name']}.{r['column_name']}": await db.pool.fetchval(
            f"SELECT count(*) FROM {r['table_name']} WHERE {r['column_name']} = ANY($1::text[])",
            list(owners),
        )
        for r in columns
    }
    assert {column: n for column, n in left.items() if n} == {}
    assert await db.pool.fetchval("SELECT count(*) FROM outbox") == 0


async def test_without_a_setting_only_the_short_lived_rows_go(fresh_db: Database) -> None:
    """Unset retention keeps every task; delivery ids after 24 h, counters of past hours,
    notices of past windows and picture days past go anyway; usage only with the setting."""
    db = fresh_db
    old = await task(db, "old", state="done", age_days=400)
    await db.pool.execute(
        "INSERT INTO seen_events (event_id, seen_at) VALUES "
        "('Ev-old', now() - interval '25 hours'), ('Ev-new', now() - interval '23 hours')"
    )
    await db.pool.execute(
        "INSERT INTO admission_counts (scope, key, window_start, messages) VALUES "
        "('user', 'u', date_trunc('hour', now(), 'UTC') - interval '1 hour', 1), "
        "('user', 'u', date_trunc('hour', now(), 'UTC'), 1)"
    )
    await db.pool.execute(
        "INSERT INTO limit_notices (scope, key, window_start, task_id) VALUES "
        "('thread', 'past', date_trunc('hour', now(), 'UTC') - interval '1 hour', 'x'), "
        "('user_tokens', 'today', date_trunc('day', now(), 'UTC'), 'y')"
    )
    await db.pool.execute(
        "INSERT INTO usage_daily (day, scope, key) VALUES (current_date - 400, 'user', 'u')"
    )
    await db.pool.execute(
        "INSERT INTO picture_days (workspace, day, bytes) VALUES "
        "('past', (now() AT TIME ZONE 'UTC')::date - 1, 5), "
        "('today', (now() AT TIME ZONE 'UTC')::date, 5)"
    )
    run = await Retention(db, days=0).run()
    assert run is not None
    assert await remaining(db, "tasks", "id") == {old}
    assert await remaining(db, "seen_events", "event_id") == {"Ev-new"}
    assert await db.pool.fetchval("SELECT count(*) FROM admission_counts") == 1
    assert await remaining(db, "limit_notices", "key") == {"today"}
    assert await remaining(db, "picture_days", "workspace") == {"today"}
    assert await db.pool.fetchval("SELECT count(*) FROM usage_daily") == 1
    await Retention(db, days=DAYS).run()
    assert await db.pool.fetchval("SELECT count(*) FROM usage_daily") == 0


async def test_while_another_replica_runs_it_this_one_skips(fresh_db: Database) -> None:
    """Two runners at once: the one without the lock deletes nothing; once the other is
    done, a run goes ahead."""
    db = fresh_db
    await task(db, "old", state="done", age_days=40)
    async with db.pool.acquire() as other:  # another session: the replica mid-run
        assert await other.fetchval("SELECT pg_try_advisory_lock($1)", _LOCK_KEY)
        assert await Retention(db, days=DAYS).run() is None
        assert await db.pool.fetchval("SELECT count(*) FROM tasks") == 1
        await other.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    run = await Retention(db, days=DAYS).run()
    assert run is not None and run.deleted["tasks"] == 1
