"""Retention: old conversations and finished work leave the database, a batch at a time.

With `THREADGATE_RETENTION_DAYS` set (unset or 0 keeps everything), each run deletes, in
this order:

1. finished tasks (done, failed, cancelled) that finished before the cutoff, and every row
   that belongs to one: its subtasks, delegating rounds, tool calls, interventions, limit
   notice, model usage (what `threadgate usage` sums) and outbox rows (the posts `task:{id}:…`, parts included). The schema has no
   cascades, so the children go first, in the same transaction as their task;
2. messages created before the cutoff (their pictures cascade), then summaries written
   before it, except in a session that still has a queued, running or waiting task: that
   task's window (and the anchor its reply hangs on) is read from them, so a running or
   queued task and its conversation are never touched;
3. sessions left with no message, summary or task, with their audit rows (and their
   picture counter, a column of theirs);
4. `usage_daily` days before the cutoff (the token budgets only read today);
5. the Slack messages kept as they arrived (`slack_messages`, storage/seen_messages.py)
   before the cutoff, and with each the record of what its streams hold
   (`slack_streams`): a stream that lost a message is no longer known complete, so a
   later need reads it from Slack again; and streams not touched since the cutoff.

Whatever the setting, each run also prunes what only matters for a while: `seen_events`
older than `SEEN_EVENTS_KEPT` (Slack retries a delivery for about an hour; a day is ample),
`admission_counts` of hours that are over, `limit_notices` whose hour or day is over, and
`picture_days` (the workspaces' picture budgets, storage/pictures.py) of days that are over.

Every delete is bounded (`batch` rows) and is its own short transaction, so a first run on
a large database never holds locks for long; a step repeats until a batch comes back short.
One replica runs at a time: the runner holds a session-level advisory lock
(`pg_try_advisory_lock`) on its connection for the run, and a replica that does not get it
skips this run. A connection that dies drops its lock with it.

Tables other parts may add that hang on a message, a task or a session must be listed here
(`TASK_ROWS`, which erasure and `threadgate sessions delete` follow too: storage/erasure.py,
storage/sessions.py; or a step of their own) or have `ON DELETE CASCADE`, or a step fails
on their foreign key; the run then logs the error and stops, deleting nothing more. A row
that names one without a foreign key would be left behind: tests/storage/test_retention.py
looks in every table's `task_id`, `message_id` and `session_id` columns after a run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from storage.database import Database
from storage.errors import StorageError, translate_errors
from storage.migrations import Connection

log = logging.getLogger(__name__)

SEEN_EVENTS_KEPT = timedelta(hours=24)
DEFAULT_BATCH = 500
# An arbitrary constant ("tgrt"), distinct from the migrations' and the lease owners' keys.
_LOCK_KEY = 0x7467_7274

# A covered task (storage/thread_queue.py) goes once the task that answers it has ended.
_FINISHED_TASKS = """
SELECT id FROM tasks t
WHERE state IN ('done', 'failed', 'cancelled', 'covered') AND finished_at < now() - $1::interval
  AND NOT (state = 'covered' AND EXISTS (
      SELECT 1 FROM tasks c WHERE c.id = t.covered_by AND c.state IN ('queued', 'running', 'waiting')))
ORDER BY finished_at LIMIT $2 FOR UPDATE OF t SKIP LOCKED
"""

# A task and every row that hangs on it, children before parents; $1 the batch's task ids.
# Erasure (storage/erasure.py) and `threadgate sessions delete` (storage/sessions.py)
# delete tasks with the same list.
TASK_ROWS = (
    ("subtasks", "DELETE FROM subtasks WHERE task_id = ANY($1::text[])"),
    ("task_rounds", "DELETE FROM task_rounds WHERE task_id = ANY($1::text[])"),
    ("tool_calls", "DELETE FROM tool_calls WHERE task_id = ANY($1::text[])"),
    ("task_interventions", "DELETE FROM task_interventions WHERE task_id = ANY($1::text[])"),
    ("limit_notices", "DELETE FROM limit_notices WHERE task_id = ANY($1::text[])"),
    ("model_usage", "DELETE FROM model_usage WHERE task_id = ANY($1::text[])"),
    ("bot_turns", "DELETE FROM bot_turns WHERE task_id = ANY($1::text[])"),
    (
        "outbox",
        "DELETE FROM outbox o USING unnest($1::text[]) AS t (id) "
        "WHERE starts_with(o.id, 'task:' || t.id || ':')",
    ),
    ("tasks", "DELETE FROM tasks WHERE id = ANY($1::text[])"),
)

_OLD_MESSAGES = """
DELETE FROM messages WHERE seq IN (
    SELECT m.seq FROM messages m
    WHERE m.created_at < now() - $1::interval
      AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.session_id = m.session_id
                      AND t.state IN ('queued', 'running', 'waiting'))
    ORDER BY m.seq LIMIT $2)
"""

# A summary is people's words retold: it goes with the turns it covers. Pictures go with
# their message (`message_attachments` cascades).
_OLD_SUMMARIES = """
DELETE FROM summaries WHERE id IN (
    SELECT s.id FROM summaries s
    WHERE s.created_at < now() - $1::interval
      AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.session_id = s.session_id
                      AND t.state IN ('queued', 'running', 'waiting'))
    ORDER BY s.id LIMIT $2)
"""

# A session's audit rows (`session_interventions`) go with it, in the same statement.
_EMPTY_SESSIONS = """
WITH gone AS (
    SELECT s.id FROM sessions s
    WHERE s.created_at < now() - $1::interval
      AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)
      AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.session_id = s.id)
      AND NOT EXISTS (SELECT 1 FROM summaries u WHERE u.session_id = s.id)
    LIMIT $2
), audit AS (
    DELETE FROM session_interventions WHERE session_id IN (SELECT id FROM gone)
)
DELETE FROM sessions WHERE id IN (SELECT id FROM gone)
"""

# A kept message goes with its thread's record and its channel's (each is no longer known
# complete); records not touched since the cutoff go too.
_OLD_SLACK_MESSAGES = """
WITH gone AS (
    DELETE FROM slack_messages WHERE ctid IN (
        SELECT ctid FROM slack_messages WHERE created_at < now() - $1::interval LIMIT $2)
    RETURNING team, channel, ts, root
), streams AS (
    DELETE FROM slack_streams s USING gone g
    WHERE s.team = g.team AND s.channel = g.channel AND (s.root = g.root OR s.root = g.ts)
)
SELECT count(*) FROM gone
"""
_OLD_SLACK_STREAMS = """
DELETE FROM slack_streams WHERE ctid IN (
    SELECT ctid FROM slack_streams WHERE updated_at < now() - $1::interval LIMIT $2)
"""

_OLD_USAGE = """
DELETE FROM usage_daily WHERE ctid IN (
    SELECT ctid FROM usage_daily WHERE day < ((now() - $1::interval) AT TIME ZONE 'UTC')::date
    LIMIT $2)
"""

# Kept whatever the setting: $1 is unused by the windows, kept for one call shape.
_SEEN_EVENTS = """
DELETE FROM seen_events WHERE event_id IN (
    SELECT event_id FROM seen_events WHERE seen_at < now() - $1::interval LIMIT $2)
"""
_ADMISSION_COUNTS = """
DELETE FROM admission_counts WHERE ctid IN (
    SELECT ctid FROM admission_counts
    WHERE window_start < date_trunc('hour', now(), 'UTC') - $1::interval LIMIT $2)
"""
_PICTURE_DAYS = """
DELETE FROM picture_days WHERE ctid IN (
    SELECT ctid FROM picture_days
    WHERE day < ((now() - $1::interval) AT TIME ZONE 'UTC')::date LIMIT $2)
"""
_LIMIT_NOTICES = """
DELETE FROM limit_notices WHERE ctid IN (
    SELECT ctid FROM limit_notices
    WHERE window_start < CASE WHEN scope IN ('user', 'thread')
                              THEN date_trunc('hour', now(), 'UTC')
                              ELSE date_trunc('day', now(), 'UTC') END - $1::interval
    LIMIT $2)
"""

Counted = Callable[[str, int], None]


@dataclass
class RetentionRun:
    """Rows deleted by one run, per table."""

    deleted: dict[str, int] = field(default_factory=dict)

    def add(self, table: str, count: int) -> None:
        if count:
            self.deleted[table] = self.deleted.get(table, 0) + count


class Retention:
    """Deletes what is past retention (module docstring); `days` 0 keeps conversations
    and finished tasks forever and prunes only the short-lived tables."""

    def __init__(
        self,
        db: Database,
        *,
        days: int,
        batch: int = DEFAULT_BATCH,
        on_deleted: Counted | None = None,
    ) -> None:
        self._db = db
        self._age = timedelta(days=days)
        self._batch = batch
        self._on_deleted = on_deleted or (lambda table, count: None)

    @translate_errors("Retention could not run")
    async def run(self) -> RetentionRun | None:
        """One run; None when another replica is running one."""
        async with self._db.pool.acquire() as conn:
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", _LOCK_KEY):
                return None
            try:
                return await self._run(conn)
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)

    async def run_every(self, seconds: float) -> None:
        """Run now and then every `seconds`, until cancelled; a failed run is logged and
        the next one tries again."""
        while True:
            try:
                run = await self.run()
            except StorageError as exc:
                log.warning("retention run failed: %s", exc)
            else:
                if run is not None and run.deleted:
                    log.info("retention deleted %s", run.deleted)
            await asyncio.sleep(seconds)

    async def _run(self, conn: Connection) -> RetentionRun:
        done = RetentionRun()
        await self._repeat(conn, done, "seen_events", _SEEN_EVENTS, SEEN_EVENTS_KEPT)
        await self._repeat(conn, done, "admission_counts", _ADMISSION_COUNTS, timedelta(0))
        await self._repeat(conn, done, "limit_notices", _LIMIT_NOTICES, timedelta(0))
        await self._repeat(conn, done, "picture_days", _PICTURE_DAYS, timedelta(0))
        if self._age:
            while await self._finished_tasks(conn, done) == self._batch:
                pass
            await self._repeat(conn, done, "messages", _OLD_MESSAGES, self._age)
            await self._repeat(conn, done, "summaries", _OLD_SUMMARIES, self._age)
            await self._repeat(conn, done, "sessions", _EMPTY_SESSIONS, self._age)
            await self._repeat(conn, done, "usage_daily", _OLD_USAGE, self._age)
            await self._repeat(conn, done, "slack_messages", _OLD_SLACK_MESSAGES, self._age)
            await self._repeat(conn, done, "slack_streams", _OLD_SLACK_STREAMS, self._age)
        for table, count in done.deleted.items():
            self._on_deleted(table, count)
        return done

    async def _finished_tasks(self, conn: Connection, done: RetentionRun) -> int:
        """One batch of finished tasks and their rows, in one transaction; how many tasks."""
        async with conn.transaction():
            ids = [r["id"] for r in await conn.fetch(_FINISHED_TASKS, self._age, self._batch)]
            if ids:
                for table, statement in TASK_ROWS:
                    done.add(table, command_count(await conn.execute(statement, ids)))
        return len(ids)

    async def _repeat(
        self, conn: Connection, done: RetentionRun, table: str, statement: str, age: timedelta
    ) -> None:
        while True:
            if statement is _OLD_SLACK_MESSAGES:  # it counts what it deleted in a row
                count = int(await conn.fetchval(statement, age, self._batch))
            else:
                count = command_count(await conn.execute(statement, age, self._batch))
            done.add(table, count)
            if count < self._batch:
                return


def command_count(status: str) -> int:
    """The row count of a command status ("DELETE 12")."""
    return int(status.rsplit(" ", 1)[-1])
