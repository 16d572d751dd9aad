"""Approvals on Postgres, as `agent.ApprovalStore`, and the decisions people make.

A pause is stored in one transaction: the round so far (`round_pauses`) and one
`tool_approvals` row per call that needs a person, each with its deadline. Storing is
idempotent, like a delegation's: a round re-run after a crash finds its pause stored and
asks with that one.

The way back mirrors delegation's hand-back (storage/delegations.py): the task waits
(`await_decisions`, the release of migration 013 under another name) and is woken by
`decide_approval` (migration 017) when the last of its requests is decided. Both lock the
task row first, so whichever comes second wakes it; and the claim's recovery look treats a
waiting task with nothing left to decide — or whose requests' time ran out — as runnable
(storage/queue.py), so a lost wake-up or a decision nobody made cannot strand it. A request
past its deadline is decided as timed out when the task's run reads its pause (`paused`).

An approved call's one run (`start_call`, `finish_call`): the row says 'running' from just
before the tool starts, and how it ended after. A run that finds it 'running' does not
start it again (agent/core/approval.py says why that is "exactly once").

Who may decide is the gateway's to say (gateway/inbound/interactions.py); what is recorded
here is the decision, who made it and when, shown by `threadgate tasks show`
(`approvals_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeAlias

import asyncpg

from agent import (
    ApprovalDecision,
    ApprovalRequest,
    CallRun,
    PausedRound,
    Task,
    Verdict,
    storable_text,
)
from storage.database import TASKS_CHANNEL, Database
from storage.errors import translate_errors
from storage.queue import address_of
from storage.tool_calls import stored

_INSERT_PAUSE = """
INSERT INTO round_pauses (task_id, number, round, state) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING RETURNING true
"""

_INSERT_REQUESTS = """
INSERT INTO tool_approvals (id, task_id, pause, index, call_id, tool, arguments, deadline)
SELECT id, $1, $2, i - 1, c, t, a, now() + make_interval(secs => $7)
FROM unnest($3::text[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS x(id, c, t, a, i)
ON CONFLICT DO NOTHING
"""

# Requests of the pause past their deadline, still undecided: timed out (a denial).
_TIME_OUT = """
UPDATE tool_approvals SET decision = 'timed_out', decided_at = now()
WHERE task_id = $1 AND pause = $2 AND decision IS NULL AND deadline <= now()
"""

_LATEST = """
SELECT number, round, state FROM round_pauses WHERE task_id = $1 ORDER BY number DESC LIMIT 1
"""

_REQUESTS = """
SELECT id, call_id, tool, arguments, decision, decided_by, decided_at
FROM tool_approvals WHERE task_id = $1 AND pause = $2 ORDER BY index
"""

# Seconds the task waited for people since its time limits last started counting (its
# arrival, or an operator's retry): each pause from when it asked to its last decision
# (to now while one is undecided).
_WAITED = """
SELECT coalesce(sum(extract(epoch FROM w.until - greatest(p.created_at, w.since))), 0)::float8
FROM round_pauses p
JOIN LATERAL (
    SELECT coalesce(max(a.decided_at), now()) AS until,
           (SELECT coalesce(t.restarted_at, t.created_at) FROM tasks t WHERE t.id = $1) AS since
    FROM tool_approvals a WHERE a.task_id = p.task_id AND a.pause = p.number
) w ON true
WHERE p.task_id = $1 AND w.until > greatest(p.created_at, w.since)
"""

_START = """
UPDATE tool_approvals SET run_state = 'running'
WHERE id = $1 AND decision = 'approved' AND run_state IS NULL RETURNING true
"""

_FINISH = """
UPDATE tool_approvals SET run_state = $2, output = $3 WHERE id = $1 AND run_state = 'running'
"""

_APPROVAL = """
SELECT a.id, a.task_id, a.tool, a.arguments, a.requested_at, a.deadline, a.decision,
       a.decided_by, a.decided_at, a.run_state, t.state AS task_state, t.session_id, t.address
FROM tool_approvals a JOIN tasks t ON t.id = a.task_id WHERE a.id = $1
"""

_OF_TASK = """
SELECT id, pause, index, call_id, tool, arguments, requested_at, deadline, decision,
       decided_by, decided_at, run_state, output
FROM tool_approvals WHERE task_id = $1 ORDER BY pause, index
"""

Decided: TypeAlias = Literal["decided", "already", "ended", "unknown"]


class PostgresApprovals:
    """`agent.ApprovalStore` on Postgres."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("The approval store could not be reached")
    async def pause(
        self, task: Task, paused: PausedRound, *, timeout_seconds: float
    ) -> PausedRound:
        requests = paused.requests
        async with self._db.pool.acquire() as conn, conn.transaction():
            fresh = await conn.fetchval(
                _INSERT_PAUSE, task.id, paused.number, paused.round, paused.state
            )
            if fresh:
                await conn.execute(
                    _INSERT_REQUESTS,
                    task.id,
                    paused.number,
                    [r.id for r in requests],
                    [r.call_id for r in requests],
                    [storable_text(r.tool) for r in requests],
                    [storable_text(r.arguments) for r in requests],
                    timeout_seconds,
                )
        stored_pause = await self.paused(task)
        assert stored_pause is not None  # stored above, by this call or an earlier one
        return stored_pause

    @translate_errors("The approval store could not be reached")
    async def paused(self, task: Task) -> PausedRound | None:
        # Most tasks never pause: one read says so, before any transaction.
        row = await self._db.pool.fetchrow(_LATEST, task.id)
        if row is None:
            return None
        async with self._db.pool.acquire() as conn, conn.transaction():
            await conn.execute(_TIME_OUT, task.id, row["number"])
            rows = await conn.fetch(_REQUESTS, task.id, row["number"])
            waited = await conn.fetchval(_WAITED, task.id)
        return PausedRound(
            row["number"],
            row["round"],
            row["state"],
            tuple(ApprovalRequest(r["id"], r["call_id"], r["tool"], r["arguments"]) for r in rows),
            {r["id"]: _decision(r) for r in rows if r["decision"] is not None},
            float(waited),
        )

    @translate_errors("The approval store could not be reached")
    async def await_decisions(self, task: Task) -> None:
        me = await self._db.lease_owner()
        # The release of migration 013: since 018 its wake-up also waits for people.
        await self._db.pool.execute(
            "SELECT await_subtasks($1, $2, $3, $4)", task.id, task.attempts, me, TASKS_CHANNEL
        )

    @translate_errors("The approval store could not be reached")
    async def start_call(self, task: Task, request_id: str) -> CallRun:
        if await self._db.pool.fetchval(_START, request_id):
            return CallRun("start")
        row = await self._db.pool.fetchrow(
            "SELECT run_state, output FROM tool_approvals WHERE id = $1", request_id
        )
        if row is None or row["run_state"] in (None, "running"):
            return CallRun("interrupted")
        return CallRun("done", row["output"] or "", is_error=row["run_state"] == "error")

    @translate_errors("The approval store could not be reached")
    async def finish_call(
        self, task: Task, request_id: str, output: str, *, is_error: bool
    ) -> None:
        state = "error" if is_error else "ok"
        await self._db.pool.execute(_FINISH, request_id, state, stored(output))


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A request as the gateway decides on it: its task's conversation and state, and
    its decision so far (None: undecided)."""

    id: str
    task: Task
    task_state: str
    tool: str
    arguments: str
    deadline: datetime
    decision: ApprovalDecision | None


@dataclass(frozen=True, slots=True)
class StoredApproval:
    """One request as `threadgate tasks show` lists it."""

    id: str
    pause: int
    index: int
    call_id: str
    tool: str
    arguments: str
    requested_at: datetime
    deadline: datetime
    decision: str | None
    decided_by: str | None
    decided_at: datetime | None
    run_state: str | None
    output: str | None


@translate_errors("The approval could not be read")
async def pending_approval(db: Database, approval_id: str) -> PendingApproval | None:
    """The request `approval_id` with its task, or None when there is none."""
    row = await db.pool.fetchrow(_APPROVAL, approval_id)
    if row is None:
        return None
    task = Task(row["task_id"], row["session_id"], address_of(row))
    decision = _decision(row) if row["decision"] is not None else None
    return PendingApproval(
        row["id"], task, row["task_state"], row["tool"], row["arguments"], row["deadline"], decision
    )


@translate_errors("The decision could not be recorded")
async def decide_approval(db: Database, approval_id: str, verdict: Verdict, who: str) -> Decided:
    """Record `who`'s decision and wake the task when nothing is left to decide:
    "decided"; "already" when it was decided before (or its time ran out, so it is timed
    out now); "ended" when its task ended first; "unknown" when there is no such request."""
    recorded = await db.pool.fetchval(
        "SELECT decide_approval($1, $2, $3, $4)", approval_id, verdict, who, TASKS_CHANNEL
    )
    if recorded:
        return "decided"
    found = await pending_approval(db, approval_id)
    if found is None:
        return "unknown"
    return "already" if found.decision is not None else "ended"


@translate_errors("The approvals could not be read")
async def approvals_of(db: Database, task_id: str) -> list[StoredApproval]:
    """The task's approval requests, in the order they were asked."""
    return [StoredApproval(**dict(row)) for row in await db.pool.fetch(_OF_TASK, task_id)]


def _decision(row: asyncpg.Record) -> ApprovalDecision:
    return ApprovalDecision(row["decision"], row["decided_by"], row["decided_at"])
