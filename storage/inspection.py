"""What an operator reads about tasks (`threadgate tasks list|show`): reads only.

Everything about one task lives in several tables — the task row (state, attempts, lease,
last error, model requests), its messages in the history (the person's turn, the
acknowledgments, the reply), its delegating rounds and their subtasks, its outbox rows
(one per post, with the `ts` Slack gave it), what operators did to it, and the prompt
epochs of its session (the newest `EPOCHS_SHOWN`: number, why it began, when, what it
offered; storage/memory.py). This module
gathers them into plain records for `gateway/operator/task_commands.py` to render; the changes
(cancel, retry) are next to the queue's, in storage/queue.py.

Nothing here is secret: tasks hold Slack ids and the conversation's text, never a token.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from agent import Task
from storage.database import Database
from storage.errors import translate_errors
from storage.migrations import Connection
from storage.queue import UnknownTask, address_of, with_parts
from storage.tool_calls import TOOL_CALLS_OF_TASK, StoredToolCall

# Every state a task can be in, in the order a task passes through them.
TASK_STATES = ("queued", "running", "waiting", "done", "failed", "cancelled", "covered")


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Which tasks `list_tasks` returns; None is "any". Ages are seconds before now."""

    states: Sequence[str] = ()
    team: str | None = None
    channel: str | None = None
    older_than: float | None = None
    newer_than: float | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class TaskSummary:
    id: str
    state: str
    team: str
    channel: str
    thread_ts: str
    user: str | None
    attempts: int
    model_requests: int
    created_at: datetime
    finished_at: datetime | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """A stored message of the task: its turn (`user`), an acknowledgment or its reply.
    An answer says which prompt epoch it was asked under and which route answered (None
    for a person's turn, and for answers stored before they were recorded)."""

    id: str
    role: str
    kind: str
    text: str
    created_at: datetime
    prompt_epoch: str | None = None
    route_provider: str | None = None
    route_model: str | None = None
    route_slot: str | None = None


@dataclass(frozen=True, slots=True)
class SubtaskRecord:
    index: int
    type: str
    params: Any
    state: str
    attempts: int
    result: str | None
    deadline: datetime
    finished_at: datetime | None
    prompt_epoch: str | None = None  # the epoch its (last) run was asked under


@dataclass(frozen=True, slots=True)
class EpochRecord:
    """One epoch of the task's session: its number there, why and when it began, and the
    epoch itself — its hash, prompt version and the tools it offered, in the order the
    model saw them (`offer_hash` None: not recorded, an epoch from before they were)."""

    number: int
    reason: str
    at: datetime
    hash: str
    version: str
    tools: tuple[str, ...]
    offer_hash: str | None

    def covers(self, epoch: str | None, at: datetime) -> bool:
        """Whether an answer stamped `epoch` at `at` may have been asked under this one."""
        return epoch == self.hash and self.at <= at


# A session's epochs shown with a task (the newest; numbers say how many came before).
EPOCHS_SHOWN = 20


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """A delegating round: the acknowledgment posted and the subtasks it started."""

    number: int
    acknowledgment: str
    created_at: datetime
    subtasks: tuple[SubtaskRecord, ...]


@dataclass(frozen=True, slots=True)
class PostRecord:
    """An outbox row: one post to Slack (`remote_ref` is its ts once known)."""

    id: str
    state: str
    attempts: int
    remote_ref: str | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class InterventionRecord:
    action: str
    actor: str
    reason: str | None
    from_state: str
    at: datetime


@dataclass(frozen=True, slots=True)
class TaskDetail:
    summary: TaskSummary
    session_id: str
    run_after: datetime
    restarted_at: datetime | None
    lease_owner: int | None
    lease_expires: datetime | None
    messages: tuple[MessageRecord, ...] = ()
    rounds: tuple[RoundRecord, ...] = ()
    posts: tuple[PostRecord, ...] = ()
    interventions: tuple[InterventionRecord, ...] = field(default=())
    tool_calls: tuple[StoredToolCall, ...] = ()
    traceparent: str | None = None  # its message's trace (W3C), when tracing was on
    epochs: tuple[EpochRecord, ...] = ()  # its session's, oldest first (the newest shown)
    # Answered by another task's reply (storage/thread_queue.py), or answering others too.
    covered_by: str | None = None
    covers: tuple[str, ...] = ()

    def epoch_of(self, epoch: str | None, at: datetime) -> EpochRecord | None:
        """The session epoch an answer stamped `epoch` at `at` was asked under: the latest
        with that hash begun by then (a session can return to an epoch it had)."""
        return next((e for e in reversed(self.epochs) if e.covers(epoch, at)), None)

    @property
    def trace_id(self) -> str | None:
        """The trace id (32 hex digits) of its message's trace, as trace viewers show it."""
        parts = (self.traceparent or "").split("-")
        return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


_SUMMARY = """
id, state, address, user_id, attempts, model_requests, created_at, finished_at, last_error
"""

# Newest first by queue order (a retried task counts as queued at its retry), which walks
# the seq index backwards and stops at the limit.
_LIST = f"""
SELECT {_SUMMARY} FROM tasks
WHERE (cardinality($1::text[]) = 0 OR state = ANY($1::text[]))
  AND ($2::text IS NULL OR address->>'team' = $2)
  AND ($3::text IS NULL OR address->>'channel' = $3)
  AND ($4::float8 IS NULL OR created_at <= now() - make_interval(secs => $4))
  AND ($5::float8 IS NULL OR created_at >= now() - make_interval(secs => $5))
ORDER BY seq DESC
LIMIT $6
"""

_TASK = f"""
SELECT {_SUMMARY}, session_id, run_after, restarted_at, lease_owner, lease_expires, traceparent,
       covered_by, ARRAY(SELECT c.id FROM tasks c WHERE c.covered_by = $1 ORDER BY c.seq) AS covers
FROM tasks WHERE id = $1
"""

_MESSAGES = """
SELECT id, role, kind, text, created_at, prompt_epoch, route_provider, route_model, route_slot
FROM messages WHERE id = ANY($1::text[]) ORDER BY seq
"""

_ROUNDS = """
SELECT number, acknowledgment, created_at FROM task_rounds WHERE task_id = $1 ORDER BY number
"""

_SUBTASKS = """
SELECT round, index, type, params, state, attempts, result, deadline, finished_at, prompt_epoch
FROM subtasks WHERE task_id = $1 ORDER BY round, index
"""

_EPOCHS = """
SELECT * FROM (
    SELECT se.number, se.reason, se.at, e.hash, e.version, e.tools, e.offer_hash
    FROM session_epochs se JOIN prompt_epochs e ON e.hash = se.epoch
    WHERE se.session_id = $1 ORDER BY se.number DESC LIMIT $2
) newest ORDER BY number
"""

_POSTS = """
SELECT id, state, attempts, remote_ref, updated_at FROM outbox
WHERE id = ANY($1::text[]) ORDER BY first_claimed_at NULLS FIRST, id
"""

_INTERVENTIONS = """
SELECT action, actor, reason, from_state, at FROM task_interventions WHERE task_id = $1 ORDER BY id
"""


@translate_errors("The tasks could not be read")
async def list_tasks(db: Database, query: TaskFilter) -> list[TaskSummary]:
    rows = await db.pool.fetch(
        _LIST,
        list(query.states),
        query.team,
        query.channel,
        query.older_than,
        query.newer_than,
        query.limit,
    )
    return [_summary(row) for row in rows]


@translate_errors("The task could not be read")
async def inspect_task(db: Database, task_id: str) -> TaskDetail:
    """Everything stored about one task; `UnknownTask` when there is none."""
    async with db.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        row = await conn.fetchrow(_TASK, task_id)
        if row is None:
            raise UnknownTask(
                f"No task has the id {task_id!r}; `threadgate tasks list` shows them."
            )
        rounds = await _rounds(conn, task_id)
        task = Task(task_id, row["session_id"], address_of(row))
        messages = await conn.fetch(_MESSAGES, _message_ids(task, len(rounds)))
        posts = await conn.fetch(_POSTS, _post_ids(task, len(rounds)))
        interventions = await conn.fetch(_INTERVENTIONS, task_id)
        tool_calls = await conn.fetch(TOOL_CALLS_OF_TASK, task_id)
        epochs = await conn.fetch(_EPOCHS, row["session_id"], EPOCHS_SHOWN)
    return TaskDetail(
        _summary(row),
        row["session_id"],
        row["run_after"],
        row["restarted_at"],
        row["lease_owner"],
        row["lease_expires"],
        tuple(MessageRecord(**m) for m in messages),
        rounds,
        tuple(PostRecord(**p) for p in posts),
        tuple(InterventionRecord(**i) for i in interventions),
        tuple(StoredToolCall(**dict(c)) for c in tool_calls),
        row["traceparent"],
        tuple(EpochRecord(**{**dict(e), "tools": tuple(e["tools"])}) for e in epochs),
        row["covered_by"],
        tuple(row["covers"]),
    )


async def _rounds(conn: Connection, task_id: str) -> tuple[RoundRecord, ...]:
    subtasks: dict[int, list[SubtaskRecord]] = {}
    for s in await conn.fetch(_SUBTASKS, task_id):
        params = json.loads(s["params"]) if isinstance(s["params"], str) else s["params"]
        record = SubtaskRecord(
            s["index"],
            s["type"],
            params,
            s["state"],
            s["attempts"],
            s["result"],
            s["deadline"],
            s["finished_at"],
            s["prompt_epoch"],
        )
        subtasks.setdefault(s["round"], []).append(record)
    return tuple(
        RoundRecord(
            r["number"], r["acknowledgment"], r["created_at"], tuple(subtasks.get(r["number"], []))
        )
        for r in await conn.fetch(_ROUNDS, task_id)
    )


def _message_ids(task: Task, rounds: int) -> list[str]:
    return [task.user_message_id, *(task.ack_id(n) for n in range(rounds)), task.reply_id]


def _post_ids(task: Task, rounds: int) -> list[str]:
    """Every outbox id the task can have posted under: acks, the still-trying notice,
    reply, failure notice, and their parts (a long message is posted as `{id}#1`, …)."""
    ids = [*(task.ack_id(n) for n in range(rounds)), task.interim_id, task.reply_id]
    return with_parts([*ids, task.failure_id])


def _summary(row: asyncpg.Record) -> TaskSummary:
    address = address_of(row)
    return TaskSummary(
        row["id"],
        row["state"],
        address.get("team", ""),
        address.get("channel", ""),
        address.get("thread_ts", ""),
        row["user_id"],
        row["attempts"],
        row["model_requests"],
        row["created_at"],
        row["finished_at"],
        row["last_error"],
    )
