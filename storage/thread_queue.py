"""How a thread's queue treats messages that arrive while its task works (issue 49).

People write in bursts. Each message is admitted as its own task (storage/admission.py),
and the queue decides, by the thread's mode (`THREADGATE_THREAD_QUEUE`, per channel in
`THREADGATE_CHANNEL_CONFIG`), how many answers they get:

- `followup`: one task per message, in order (the queue as it was).
- `collect`: the task that is claimed next in a thread *covers* the later queued tasks of
  its session, in the transaction of the claim (`TASK_COVER`, joined to the claim by
  storage/queue.py): each covered task ends 'covered' with `covered_by` naming its
  coverer, and its turn becomes a turn of the coverer's request; one reply answers them
  all. A task claimed again (after waiting for its subtasks, the models or a person's
  approval) covers what arrived meanwhile the same way.
- `steer`: as `collect`, and a running round takes the thread's new messages before each
  further model call (`take_steered`, fenced by the round's lease); a message that
  arrives after the round's last model call is answered by the next task.
- `interrupt`: as `collect`, and a new message of the person whose task is working ends
  that task's lease as a Stop does (`interrupt_asker`); the task is queued again, not
  cancelled, and its next run covers everything pending.

Exactly once: a covered task has no answer of its own and is never claimed; its coverer's
reply (`task:{coverer}:reply`) answers it, anchored after the newest covered turn
(`agent.Task.newest_turn_id`). Claim and cover commit together, so a crash either left
both or neither, and the re-run after a crash finds what it covered (`covered_by`) and
covers at most what arrived since. A task whose reply is stored (a crash before its post,
or a limit notice) covers nothing more: its reply was written without them. What cannot be
covered stays in order behind it: a stopped task, a schedule's run, a message with its
reply stored at admission, and everything after one of these (covering never jumps a
message). At most `MAX_COVERED` messages are covered by one task, so every covered turn
fits the window (the rest is answered by the next task).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import asyncpg

from agent import StoredMessage, Task, ThreadQueueMode, user_message_id
from storage.database import STOPS_CHANNEL, TASKS_CHANNEL, Database
from storage.errors import translate_errors
from storage.history import message_from_row

# The most messages one task covers besides its own (each a turn of its window).
MAX_COVERED = 20


@dataclass(frozen=True, slots=True)
class QueueModes:
    """The mode of every channel: the deployment's, and the channels' own."""

    default: ThreadQueueMode = "followup"
    channels: Mapping[str, ThreadQueueMode] = field(default_factory=dict)

    def of(self, channel: str) -> ThreadQueueMode:
        return self.channels.get(channel, self.default)

    def as_json(self) -> str:
        """As the claim reads it (`TASK_COVER`'s modes parameter)."""
        return json.dumps({"default": self.default, "channels": dict(self.channels)})


FOLLOWUP = QueueModes()

# Whether task `{t}` can be covered: queued, not stopped, a person's message, without a
# reply stored at admission (a limit notice answers it already).
_COVERABLE = """({t}.state = 'queued' AND {t}.stopped_at IS NULL AND {t}.schedule_id IS NULL
    AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.id = 'task:' || {t}.id || ':reply'))"""

# The later queued tasks that the claimed task `{p}candidate` covers (module docstring),
# locked and marked in the claim's statement. `{modes}` is the parameter with the modes
# (`QueueModes.as_json`). Appended to storage/queue.py's TASK_CANDIDATE.
TASK_COVER = f"""
, {{p}}coverer AS (
    SELECT t.id, t.session_id, t.seq,
           (SELECT count(*) FROM tasks d WHERE d.covered_by = t.id) AS before
    FROM tasks t JOIN {{p}}candidate c ON c.id = t.id
    WHERE t.stopped_at IS NULL AND t.schedule_id IS NULL
      AND coalesce({{modes}}::jsonb -> 'channels' ->> (t.address->>'channel'),
                   {{modes}}::jsonb ->> 'default') <> 'followup'
      AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.id = 'task:' || t.id || ':reply')
), {{p}}coverable AS (
    SELECT o.id FROM {{p}}coverer k JOIN tasks o ON o.session_id = k.session_id
    WHERE o.seq > k.seq AND {_COVERABLE.format(t="o")}
      AND o.seq < coalesce((SELECT min(b.seq) FROM tasks b
                            WHERE b.session_id = k.session_id AND b.seq > k.seq
                              AND b.state IN ('queued', 'running', 'waiting')
                              AND NOT {_COVERABLE.format(t="b")}), 'Infinity'::numeric)
    ORDER BY o.seq
    LIMIT greatest(0, {MAX_COVERED} - (SELECT before FROM {{p}}coverer))
), {{p}}covered AS (
    UPDATE tasks SET state = 'covered', covered_by = k.id, finished_at = now(),
           lease_owner = NULL, lease_expires = NULL
    FROM {{p}}coverer k
    WHERE tasks.id IN (SELECT id FROM {{p}}coverable) AND tasks.state = 'queued'
    RETURNING tasks.id, tasks.seq
)
"""

# What the claimed task covers, oldest first: what it covered before (a re-run) and what
# this claim covered. A column of TASK_LEASE's RETURNING.
COVERS_COLUMN = """ARRAY(SELECT x.id FROM (
              SELECT d.id, d.seq FROM tasks d WHERE d.covered_by = tasks.id
              UNION SELECT n.id, n.seq FROM {p}covered n) x ORDER BY x.seq) AS covers"""


# The queued messages a steering round takes (`take_steered`): its lease must hold, its
# thread's mode is the caller's to know; the same rules as a claim's cover.
_STEER = f"""
WITH k AS (
    SELECT t.id, t.session_id, t.seq,
           (SELECT count(*) FROM tasks d WHERE d.covered_by = t.id) AS before
    FROM tasks t
    WHERE t.id = $1 AND t.attempts = $2 AND t.state = 'running' AND t.lease_owner = $3
      AND t.stopped_at IS NULL
    FOR UPDATE
), coverable AS (
    SELECT o.id FROM k JOIN tasks o ON o.session_id = k.session_id
    WHERE o.seq > k.seq AND {_COVERABLE.format(t="o")}
      AND o.seq < coalesce((SELECT min(b.seq) FROM tasks b
                            WHERE b.session_id = k.session_id AND b.seq > k.seq
                              AND b.state IN ('queued', 'running', 'waiting')
                              AND NOT {_COVERABLE.format(t="b")}), 'Infinity'::numeric)
    ORDER BY o.seq
    LIMIT greatest(0, {MAX_COVERED} - (SELECT before FROM k))
)
UPDATE tasks SET state = 'covered', covered_by = k.id, finished_at = now()
FROM k
WHERE tasks.id IN (SELECT id FROM coverable) AND tasks.state = 'queued'
RETURNING tasks.id, tasks.seq
"""


@translate_errors("The thread's new messages could not be taken")
async def take_steered(db: Database, task_id: str, attempts: int) -> list[str]:
    """Cover the queued messages behind the running task `task_id` (its lease, attempt
    `attempts`, must be this process's); the ids of the tasks covered, oldest first."""
    owner = await db.lease_owner()
    rows = await db.pool.fetch(_STEER, task_id, attempts, owner)
    return [r["id"] for r in sorted(rows, key=lambda r: r["seq"])]


_TURNS = """
SELECT id, session_id, role, kind, text, pinned, citations, notes, deleted_at
FROM messages WHERE id = ANY($1::text[]) ORDER BY seq
"""


class PostgresSteering:
    """`agent.Steering` on Postgres: `take_steered`, then the covered tasks' turns."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def take(self, task: Task) -> Sequence[StoredMessage]:
        covered = await take_steered(self._db, task.id, task.attempts)
        if not covered:
            return ()
        rows = await self._read(covered)
        return [message_from_row(r) for r in rows]

    @translate_errors("The thread's new messages could not be read")
    async def _read(self, covered: list[str]) -> list[asyncpg.Record]:
        return await self._db.pool.fetch(_TURNS, [user_message_id(t) for t in covered])


# The working task of the asker's thread that a new message of theirs interrupts: the
# oldest open task, running (or waiting for subtasks, not for people), not stopped, its
# reply not stored (then it is posting: let it finish, the new message gets its own).
_WORKING = """
SELECT t.id, t.state FROM tasks t
WHERE t.session_id = (SELECT session_id FROM tasks WHERE id = $1)
  AND t.state IN ('queued', 'running', 'waiting')
ORDER BY t.seq
LIMIT 1
FOR UPDATE
"""

_INTERRUPTIBLE = """
SELECT 1 FROM tasks t, tasks n
WHERE t.id = $1 AND n.id = $2 AND t.id <> n.id AND t.stopped_at IS NULL
  AND t.schedule_id IS NULL AND t.address->>'user' = n.address->>'user'
  AND (t.state = 'running' OR (t.state = 'waiting' AND NOT waits_for_people(t.id)))
  AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.id = 'task:' || t.id || ':reply')
"""

# `interrupted_at` is read off the clock while the row's lock is held, as a claim reads its
# `leased_at` (storage/queue.py): the interrupted attempt tells by it that it was this.
_INTERRUPT = """
UPDATE tasks SET state = 'queued', run_after = now(), interrupted_at = clock_timestamp(),
       lease_owner = NULL, lease_expires = NULL
WHERE id = $1
"""

_END_SUBTASKS = """
UPDATE subtasks SET state = 'failed',
       result = 'The subtask was stopped: a new message of the person who asked came in.',
       finished_at = now(), lease_owner = NULL, lease_expires = NULL
WHERE task_id = $1 AND state IN ('queued', 'running')
"""

_RECORD = """
INSERT INTO task_interventions (task_id, action, actor, reason, from_state)
SELECT $1, 'interrupt', 'slack:' || (address->>'user'), 'a new message: ' || $3, $2
FROM tasks WHERE id = $3
"""


@translate_errors("The working task could not be interrupted")
async def interrupt_asker(db: Database, new_task_id: str) -> str | None:
    """A new message (`new_task_id`, admitted) of the person whose task works in its
    thread ends that task's lease and queues it again, its subtasks ended, so that its
    next run answers with everything pending; the interrupted task's id, None when
    nothing of theirs was working."""
    async with db.pool.acquire() as conn, conn.transaction():
        working = await conn.fetchrow(_WORKING, new_task_id)
        if working is None or not await conn.fetchval(_INTERRUPTIBLE, working["id"], new_task_id):
            return None
        await conn.execute(_INTERRUPT, working["id"])
        await conn.execute(_END_SUBTASKS, working["id"])
        await conn.execute(_RECORD, working["id"], working["state"], new_task_id)
        # As a stop: the holder's heartbeat beats at once and finds its lease gone.
        await conn.execute("SELECT pg_notify($1, $2)", STOPS_CHANNEL, working["id"])
        await conn.execute("SELECT pg_notify($1, '')", TASKS_CHANNEL)
        return str(working["id"])
