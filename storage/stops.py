"""Someone pressed Stop in a thread: its work ends on every replica, and says so once.

Slack's Stop button (`agent_session_stopped`) names a thread, not a task. `stop_thread`
stops every open task of that thread in one transaction that locks their rows first, as
every claim, fence and finish does (storage/queue.py), so a stop racing a worker's finish
has one winner:

- The thread's oldest open task — the one working, or next to — is *stopped*: its lease
  ends (`state` 'queued', no owner) and it is marked (`stopped_at`, `stopped_by`). Its
  worker, on whichever replica, learns it at once: the NOTIFY on `threadgate_stops` makes
  every heartbeat beat (storage/database.py), and the stopped one finds its lease gone and
  cuts the round wherever it is — a model request, a tool call — through the runner's
  lease-loss path; what slips through is fenced (its posts, its finish). Being queued, the
  stopped task is claimed again at once, by any replica, a restarted one too: the runner
  then asks no model, posts the note that the work was stopped (`task:{id}:stopped`,
  through the outbox: once), and finishes it 'cancelled' (`finish` of a stopped task
  cancels it). Until then it is its thread's oldest open task, so the thread's next message
  waits for the note and is then answered as usual.
- Stop is a safety button: anyone in the thread may press it, and it stops the working
  task whoever asked for it (the note says who pressed it). What waits behind it is
  another matter: the presser's own messages admitted before the stop (sent while it
  worked) are cancelled outright — "stop what you are doing here", and they would
  otherwise start as soon as the note is out — but other people's stay queued and are
  answered after the note: one person's Stop cancels nobody else's question. Messages
  after the stop are answered as usual.
- Messages the stopped task covered (a thread that collects them, storage/thread_queue.py)
  go the same way: the presser's are cancelled with it, other people's are given back —
  queued again in their place — and answered after the note.
- Subtasks of every stopped task end 'failed' (what a sub-agent runs is cut the same way,
  by its heartbeat); their results feed nothing, since the task's next round never runs.

A person may also stop only their own work, by name rather than by thread (`stop_own_on`:
`/threadgate stop` in a channel or DM, or the Stop button of a task on their App Home).
In each conversation where they have open tasks, the same rule applies with "only theirs"
added: their task working (the conversation's oldest open one) is stopped, with its note;
their tasks queued behind anyone's are cancelled; nobody else's task is touched (what
their stopped task had collected of other people's is given back, as above).

A task whose reply or failure notice is already in the thread has ended in effect and is
left to finish. Each stop is recorded as an intervention (action 'stop', the Slack user as
actor), beside operators' cancels and retries.
"""

from __future__ import annotations

from dataclasses import dataclass

from asyncpg import Record

from storage.database import STOPS_CHANNEL, TASKS_CHANNEL, Database
from storage.errors import translate_errors
from storage.migrations import Connection

# The thread's open tasks, oldest first, locked; with whether their ending post is out.
_OPEN_IN_THREAD = """
SELECT t.id, t.state, t.address->>'user' AS asker,
       EXISTS (SELECT 1 FROM outbox o WHERE o.state = 'sent' AND o.id = ANY(
           ARRAY['task:' || t.id || ':reply', 'task:' || t.id || ':failure'])) AS ended
FROM tasks t
WHERE t.state IN ('queued', 'running', 'waiting') AND t.stopped_at IS NULL
  AND t.address->>'channel' = $2 AND t.address->>'thread_ts' = $3
  AND t.address->>'team' = $1
ORDER BY t.seq
FOR UPDATE OF t
"""

_STOP = """
UPDATE tasks SET state = 'queued', run_after = now(), stopped_at = now(), stopped_by = $2,
       lease_owner = NULL, lease_expires = NULL
WHERE id = $1
"""

_CANCEL = """
UPDATE tasks SET state = 'cancelled', finished_at = now(), stopped_at = now(),
       stopped_by = $2, lease_owner = NULL, lease_expires = NULL
WHERE id = $1
"""

# The tasks the stopped one covered: the presser's ($2) cancelled, the others queued again.
_UNCOVER = """
UPDATE tasks SET
    state = CASE WHEN address->>'user' = $2 THEN 'cancelled' ELSE 'queued' END,
    covered_by = CASE WHEN address->>'user' = $2 THEN covered_by END,
    finished_at = CASE WHEN address->>'user' = $2 THEN now() END,
    stopped_at = CASE WHEN address->>'user' = $2 THEN now() END,
    stopped_by = CASE WHEN address->>'user' = $2 THEN $3 END,
    run_after = now()
WHERE covered_by = $1 AND state = 'covered'
RETURNING id, state
"""

_STOP_SUBTASKS = """
UPDATE subtasks SET state = 'failed', result = 'The subtask was stopped.',
       finished_at = now(), lease_owner = NULL, lease_expires = NULL
WHERE task_id = ANY($1::text[]) AND state IN ('queued', 'running')
"""

_RECORD = """
INSERT INTO task_interventions (task_id, action, actor, reason, from_state)
SELECT unnest($1::text[]), 'stop', $2, $4, unnest($3::text[])
"""
_PRESSED = "Stop pressed in Slack"


@dataclass(frozen=True, slots=True)
class ThreadStop:
    """A Stop pressed in one thread: the tenant's team, the channel, the thread's root ts,
    and who pressed it."""

    team: str
    channel: str
    thread_ts: str
    user: str


@dataclass(frozen=True, slots=True)
class Stopped:
    """What a stop ended: the task that will say so (None: nothing was working) and the
    presser's own later tasks cancelled with it."""

    task_id: str | None
    cancelled: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.task_id is not None


@translate_errors("The stop could not be recorded")
async def stop_thread(db: Database, stop: ThreadStop) -> Stopped:
    """Stop the thread's work (module docstring); durable when this returns."""
    async with db.pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(_OPEN_IN_THREAD, stop.team, stop.channel, stop.thread_ts)
        open_rows = [r for r in rows if not r["ended"]]
        if not open_rows:
            return Stopped(None)
        actor = f"slack:{stop.user}"
        first, *later = open_rows
        own = [r for r in later if r["asker"] == stop.user]  # others' stay queued
        await conn.execute(_STOP, first["id"], actor)
        for row in own:
            await conn.execute(_CANCEL, row["id"], actor)
        uncovered = await conn.fetch(_UNCOVER, first["id"], stop.user, actor)
        covered = [r["id"] for r in uncovered if r["state"] == "cancelled"]
        ids = [first["id"], *covered, *(r["id"] for r in own)]
        states = [first["state"], *(["covered"] * len(covered)), *(r["state"] for r in own)]
        await conn.execute(_STOP_SUBTASKS, ids)
        await conn.execute(_RECORD, ids, actor, states, _PRESSED)
        await _signal(conn, first["id"])
        return Stopped(first["id"], tuple(ids[1:]))


# The open tasks of every conversation where the person has an open task (in one channel,
# or one task of theirs), oldest first, locked; $1 "team:user", $2 "team:channel" or NULL,
# $3 a task id or NULL.
_OPEN_IN_THEIR_SESSIONS = """
SELECT t.id, t.session_id, t.state, t.user_id,
       EXISTS (SELECT 1 FROM outbox o WHERE o.state = 'sent' AND o.id = ANY(
           ARRAY['task:' || t.id || ':reply', 'task:' || t.id || ':failure'])) AS ended
FROM tasks t
WHERE t.state IN ('queued', 'running', 'waiting') AND t.stopped_at IS NULL
  AND t.session_id IN (
      SELECT m.session_id FROM tasks m
      WHERE m.state IN ('queued', 'running', 'waiting') AND m.stopped_at IS NULL
        AND m.user_id = $1 AND ($2::text IS NULL OR m.channel = $2)
        AND ($3::text IS NULL OR m.id = $3))
ORDER BY t.seq
FOR UPDATE OF t
"""


@dataclass(frozen=True, slots=True)
class OwnStop:
    """A person stopping their own work: the tenant's team, who, and where — a channel
    (None: anywhere), or one task of theirs (None: all of them there) — and why, for the
    record."""

    team: str
    user: str
    channel: str | None = None
    task_id: str | None = None
    reason: str = "/threadgate stop"


@dataclass(frozen=True, slots=True)
class OwnStopped:
    """What an own stop ended: the tasks stopped while working (each says so once) and
    those cancelled while they waited."""

    stopped: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.stopped or self.cancelled)


async def stop_own_on(conn: Connection, stop: OwnStop) -> OwnStopped:
    """Stop the person's own work (module docstring) in the caller's transaction."""
    me = f"{stop.team}:{stop.user}"
    channel = f"{stop.team}:{stop.channel}" if stop.channel else None
    rows = await conn.fetch(_OPEN_IN_THEIR_SESSIONS, me, channel, stop.task_id)
    sessions: dict[str, list[Record]] = {}
    for row in rows:
        if not row["ended"]:
            sessions.setdefault(row["session_id"], []).append(row)
    stopped: list[Record] = []
    cancelled: list[Record] = []
    for open_rows in sessions.values():
        mine = [r for r in open_rows if r["user_id"] == me and stop.task_id in (None, r["id"])]
        if mine and mine[0] is open_rows[0]:
            stopped.append(mine.pop(0))
        cancelled += mine
    actor = f"slack:{stop.user}"
    covered: list[str] = []  # the person's messages a stopped task had collected
    for row in stopped:
        await conn.execute(_STOP, row["id"], actor)
        uncovered = await conn.fetch(_UNCOVER, row["id"], stop.user, actor)
        covered += [r["id"] for r in uncovered if r["state"] == "cancelled"]
    for row in cancelled:
        await conn.execute(_CANCEL, row["id"], actor)
    ended = stopped + cancelled
    if ended:
        ids = [r["id"] for r in ended] + covered
        states = [r["state"] for r in ended] + ["covered"] * len(covered)
        await conn.execute(_STOP_SUBTASKS, ids)
        await conn.execute(_RECORD, ids, actor, states, stop.reason)
    for row in stopped:
        await _signal(conn, row["id"])
    return OwnStopped(tuple(r["id"] for r in stopped), tuple(r["id"] for r in cancelled))


@translate_errors("The stop could not be recorded")
async def stop_own(db: Database, stop: OwnStop) -> OwnStopped:
    """`stop_own_on` in a transaction of its own; durable when this returns."""
    async with db.pool.acquire() as conn, conn.transaction():
        return await stop_own_on(conn, stop)


async def _signal(conn: Connection, task_id: str) -> None:
    """Sent when the transaction commits: the worker holding the lease stops, and a worker
    wakes to claim the stopped task and say so."""
    await conn.execute("SELECT pg_notify($1, $2)", STOPS_CHANNEL, task_id)
    await conn.execute("SELECT pg_notify($1, '')", TASKS_CHANNEL)
