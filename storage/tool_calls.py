"""Work-tool calls in Postgres: `PostgresToolCalls` records them, `tool_calls_of` reads them.

`PostgresToolCalls` is an `agent.ToolObserver`: the round tells it when a call starts and
when it ends, and it upserts one row per (task, call id) — a retried round that reuses a
call id overwrites the earlier run's row, so the row shows the call as it last ran. The
round is not part of what the agent reports; it is read here as the number of delegating
rounds the task has stored, which is the running round's number (for a sub-agent's call,
the number of the round its result feeds).

Arguments and output pass through the same cleaning as history (`agent.storable_text`:
no NUL, no lone surrogates) and are capped at `STORED_CHARS`, saying so when cut: the
table is for reading what happened, and a tool that returned a megabyte must not make
every task view (or the table) a megabyte.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from agent import Task, ToolCallRecord, ToolCallState, storable_text
from storage.database import Database
from storage.errors import translate_errors

STORED_CHARS = 20_000

_UPSERT = """
INSERT INTO tool_calls (task_id, round, call_id, name, arguments, state, output, ended_at)
VALUES ($1, (SELECT count(*) FROM task_rounds WHERE task_id = $1), $2, $3, $4, $5, $6,
        CASE WHEN $5 = 'running' THEN NULL ELSE now() END)
ON CONFLICT (task_id, call_id) DO UPDATE SET
    name = excluded.name,
    arguments = excluded.arguments,
    state = excluded.state,
    output = excluded.output,
    started_at = CASE WHEN excluded.state = 'running' THEN now() ELSE tool_calls.started_at END,
    ended_at = excluded.ended_at
"""

TOOL_CALLS_OF_TASK = """
SELECT task_id, round, call_id, name, arguments, state, output, started_at, ended_at
FROM tool_calls WHERE task_id = $1 ORDER BY started_at, call_id
"""


@dataclass(frozen=True, slots=True)
class StoredToolCall:
    """One stored work-tool call of a task."""

    task_id: str
    round: int
    call_id: str
    name: str
    arguments: str
    state: ToolCallState
    output: str
    started_at: datetime
    ended_at: datetime | None


class PostgresToolCalls:
    """`agent.ToolObserver` that stores every call, upserted by (task id, call id)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("The tool call could not be recorded")
    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        if record.progress is not None:
            return  # shown while the call runs, never kept: the row says "running" already
        await self._db.pool.execute(
            _UPSERT,
            task.id,
            record.call_id,
            storable_text(record.name),
            stored(record.arguments),
            record.state,
            stored(record.output),
        )


@translate_errors("The tool calls could not be read")
async def tool_calls_of(db: Database, task_id: str) -> list[StoredToolCall]:
    """The task's tool calls, in the order they started."""
    rows = await db.pool.fetch(TOOL_CALLS_OF_TASK, task_id)
    return [StoredToolCall(**dict(row)) for row in rows]


def stored(text: str) -> str:
    """`text` as the table keeps it: storable, and at most `STORED_CHARS` characters."""
    clean = storable_text(text)
    if len(clean) <= STORED_CHARS:
        return clean
    return (
        f"{clean[:STORED_CHARS]}\n[cut: {len(clean):,} characters, the first {STORED_CHARS:,} kept]"
    )
