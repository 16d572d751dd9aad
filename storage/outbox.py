"""The outbox: one row per outgoing post, so each post reaches Slack once.

A post whose call to Slack failed ambiguously — the process died after sending, the
response was lost, Slack answered 5xx — may or may not be in the thread. The row records
enough to settle that without a lock held across the call:

- **who**: every claim is fenced by the task's current lease, in the same transaction. A
  claim by an attempt that is no longer the task's current one (its task was taken over,
  or its process's signal connection dropped since it claimed the task) is refused with
  `Superseded`: a stale worker never posts, and never searches the thread while the
  current attempt's post is on its way. `claimed_by` names the attempt that claimed last.
- **until when**: `settle_after` is when the last call made for the row must be over and
  its post visible: armed at `now() + call_seconds + settle_seconds` right before the call
  (the publisher bounds the call by `call_seconds`), brought forward to `now() +
  settle_seconds` when the caller saw the call end without knowing its outcome. A claim
  that finds the row unfinished answers "unknown" with how long to wait before looking
  in the thread: looking earlier could miss a post that is still landing, and post again.
- **since when**: `first_claimed_at`; no post of the row can be older, so the search of
  the thread starts there.

A call that Slack refused outright (an `ok: false` answer, a 429 after every retry), or
that never reached Slack, posted nothing: the row becomes 'unsent' and the next claim
posts without looking. So does a search of the thread that did not find the post
(`settle`, "absent").

A streamed message is shown before it is complete: its row becomes 'open' with the
message's ts the moment Slack returns it (`opened`), and a claim that finds it 'open'
answers "open" with that ts — the claimer completes that message rather than posting
another. A draft taken back (`release`) returns the row to 'unsent' once its message was
deleted.

The states, what a claim answers in each, and every move between them are one table,
`OUTBOX_STATES` (storage/outbox_states.py); the statements here make those moves.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Literal

import asyncpg

from storage.database import Database
from storage.errors import StorageError, translate_errors
from storage.migrations import Connection
from storage.outbox_states import ClaimAnswer, PostEvent, PostState, Settlement, answer, moved


class Superseded(StorageError):
    """The task's attempt is no longer its current lease: its posts, and the storing of
    its reply (storage/history.py), are refused."""


@dataclass(frozen=True, slots=True)
class Claim:
    """What a claim found. "new": post now (the row is armed). "sent": nothing to do.
    "unknown": an earlier call's outcome is unknown; wait `wait_seconds` (until that call
    must be over and its post visible), look for the post in the thread among messages
    posted after `since` (None: no bound), and `arm` the row before posting it again.
    "open": a streamed message `ts` shows the post, not yet complete: complete it."""

    state: ClaimAnswer
    wait_seconds: float = 0.0
    since: datetime | None = None
    ts: str | None = None


# The fence: the task is running under exactly this attempt and this process's current
# lease owner. FOR SHARE keeps a claim of the task (FOR UPDATE) from slipping in before
# our outbox write commits.
_FENCE = """
SELECT true FROM tasks
WHERE id = $1 AND attempts = $2 AND state = 'running' AND lease_owner = $3
FOR SHARE
"""

# A claim in one round trip, whatever the row's state: the fence, the row's insert, and
# when it exists already, its lock and its take-over (as `_EXISTING` then `_ARM` or
# `_TAKE_OVER` do in `_fenced`), in one statement (one transaction). The fence's row lock
# is held until the statement's transaction commits, as in `_fenced`; nothing is written
# unless the fence holds. `fenced` false: the attempt is superseded. `inserted`: a new
# row. Else `state` is what the row was (its latest version, once its lock was ours), or
# NULL when the statement could not see it (inserted by another claim after this one
# began, or deleted): the claim is then made again through `_fenced`.
_CLAIM = """
WITH fence AS (
    SELECT true FROM tasks
    WHERE id = $4 AND attempts = $2 AND state = 'running' AND lease_owner = $5
    FOR SHARE
), inserted AS (
    INSERT INTO outbox (id, state, claimed_by, claimed_at, first_claimed_at, settle_after)
    SELECT $1, 'sending', $2, now(), now(), now() + make_interval(secs => $3) FROM fence
    ON CONFLICT (id) DO NOTHING
    RETURNING true
), existing AS (
    SELECT id, state, first_claimed_at, remote_ref,
           greatest(0, extract(epoch FROM settle_after - now()))::float8 AS wait
    FROM outbox WHERE id = $1 AND EXISTS (SELECT 1 FROM fence)
    FOR UPDATE
), taken AS (
    UPDATE outbox o
    SET attempts = o.attempts + 1, claimed_by = $2, claimed_at = now(), updated_at = now(),
        state = CASE WHEN e.state = 'unsent' THEN 'sending' ELSE o.state END,
        settle_after = CASE WHEN e.state = 'unsent' THEN now() + make_interval(secs => $3)
                            ELSE o.settle_after END
    FROM existing e WHERE o.id = e.id AND e.state <> 'sent'
)
SELECT EXISTS (SELECT 1 FROM fence) AS fenced, EXISTS (SELECT 1 FROM inserted) AS inserted,
       e.state, e.first_claimed_at, e.remote_ref, e.wait
FROM (VALUES (true)) AS one (x) LEFT JOIN existing e ON true
"""

_INSERT = """
INSERT INTO outbox (id, state, claimed_by, claimed_at, first_claimed_at, settle_after)
VALUES ($1, 'sending', $2, now(), now(), now() + make_interval(secs => $3))
ON CONFLICT (id) DO NOTHING
RETURNING true
"""

_EXISTING = """
SELECT state, first_claimed_at, remote_ref,
       greatest(0, extract(epoch FROM settle_after - now()))::float8 AS wait
FROM outbox WHERE id = $1
FOR UPDATE
"""

# Taking over an unfinished row leaves `settle_after` alone: it belongs to the call that
# may still be landing.
_TAKE_OVER = """
UPDATE outbox SET attempts = attempts + 1, claimed_by = $2, claimed_at = now(), updated_at = now()
WHERE id = $1
"""

_ARM = """
UPDATE outbox SET state = 'sending', attempts = attempts + 1, claimed_by = $2,
       claimed_at = now(), settle_after = now() + make_interval(secs => $3), updated_at = now()
WHERE id = $1 AND state IN ('sending', 'unsent')
RETURNING true
"""

# Only the attempt that armed the row knows how its call ended; a later claimer that
# took the row over waits for the armed deadline instead.
_CALL_UNCERTAIN = """
UPDATE outbox SET settle_after = least(settle_after, now() + make_interval(secs => $3)),
       updated_at = now()
WHERE id = $1 AND claimed_by = $2 AND state = 'sending'
"""

_CALL_REFUSED = """
UPDATE outbox SET state = 'unsent', settle_after = now(), updated_at = now()
WHERE id = $1 AND claimed_by = $2 AND state = 'sending'
"""

_OPENED = """
UPDATE outbox SET state = 'open', remote_ref = $3, updated_at = now()
WHERE id = $1 AND claimed_by = $2 AND state = 'sending'
"""

_OPEN_TS = """
SELECT remote_ref FROM outbox WHERE id = $1 AND state = 'open'
"""

_RELEASE = """
UPDATE outbox SET state = 'unsent', remote_ref = NULL, settle_after = now(), updated_at = now()
WHERE id = $1 AND state = 'open' AND remote_ref = $2
"""

_SHOWN = """
SELECT state, remote_ref FROM outbox WHERE id = $1
"""

_KNOWN_REFS = """
SELECT remote_ref FROM outbox WHERE remote_ref = ANY($1::text[])
"""

_SENT = """
UPDATE outbox SET state = 'sent', remote_ref = coalesce($2, remote_ref), updated_at = now()
WHERE id = $1
"""

# `mark_sent` of many rows, as a CTE of another statement ({ids} and {refs}: text arrays of
# the rows' ids and their ts, NULL where not known): the task's finish marks the posts of
# its reply sent in its own statement (storage/queue.py, `agent.Delivered`). Not fenced,
# as `_SENT` is not.
_SENT_POSTS = """
sent AS (
    UPDATE outbox o SET state = 'sent', remote_ref = coalesce(p.ref, o.remote_ref),
           updated_at = now()
    FROM unnest({ids}::text[], {refs}::text[]) AS p (id, ref)
    WHERE o.id = p.id
    RETURNING o.id
)"""


def sent_posts(ids: str, refs: str) -> str:
    """`_SENT_POSTS` of the rows whose ids and ts are the parameters `ids` and `refs`."""
    return _SENT_POSTS.format(ids=ids, refs=refs)


# The statement of each move (storage/outbox_states.py) that one statement makes; a claim's
# moves are `_CLAIM`'s (or, when it must be made again, `_INSERT`, `_ARM`, `_TAKE_OVER`).
MOVES: Mapping[PostEvent, str] = MappingProxyType(
    {
        "arm": _ARM,
        "call_uncertain": _CALL_UNCERTAIN,
        "call_refused": _CALL_REFUSED,
        "opened": _OPENED,
        "release": _RELEASE,
        "mark_sent": _SENT,
        "found": _SENT,
        "unverified": _SENT,
        "orphan": _OPENED,
        "absent": _CALL_REFUSED,
    }
)


class Outbox:
    """The outbox on Postgres. `call_seconds` is the longest a call to Slack for a post
    may take (the publisher enforces it); `settle_seconds` the margin after a call ended
    before its post must be visible in the thread."""

    def __init__(self, db: Database, *, call_seconds: float, settle_seconds: float) -> None:
        self._db = db
        self.call_seconds = call_seconds
        self.settle_seconds = settle_seconds

    @translate_errors("The outbox could not be reached")
    async def claim(self, post_id: str, task_id: str, attempt: int) -> Claim:
        """Claim the row for attempt `attempt` of task `task_id`; `Superseded` if that is
        not the task's current lease."""
        armed = self.call_seconds + self.settle_seconds
        owner = await self._db.lease_owner()
        row = await self._db.pool.fetchrow(_CLAIM, post_id, attempt, armed, task_id, owner)
        assert row is not None
        if not row["fenced"]:
            raise _superseded(task_id, attempt)
        if row["inserted"]:
            return Claim(answer(None))
        if row["state"] is not None:
            return _claimed(row["state"], row)
        async with self._fenced(task_id, attempt) as conn:
            if await conn.fetchval(_INSERT, post_id, attempt, armed):  # deleted meanwhile
                return Claim(answer(None))
            row = await conn.fetchrow(_EXISTING, post_id)
            assert row is not None
            state = row["state"]
            if moved(state, "claim") not in (None, state):  # armed again
                await conn.execute(MOVES["arm"], post_id, attempt, armed)
            elif moved(state, "claim") is not None:
                await conn.execute(_TAKE_OVER, post_id, attempt)
            return _claimed(state, row)

    @translate_errors("The outbox could not be reached")
    async def arm(self, post_id: str, task_id: str, attempt: int) -> bool:
        """About to post again after an "unknown" claim found nothing: fenced like a claim.
        False when the row was marked sent meanwhile (an earlier call did land)."""
        armed = self.call_seconds + self.settle_seconds
        async with self._fenced(task_id, attempt) as conn:
            return bool(await conn.fetchval(MOVES["arm"], post_id, attempt, armed))

    @translate_errors("The outbox could not be reached")
    async def call_ended(
        self, post_id: str, attempt: int, *, posted: Literal[False] | None
    ) -> None:
        """The call `attempt` made for the row is over without a `ts`: `posted=None` when
        its outcome is unknown (the post may be visible only after `settle_seconds`),
        False when Slack refused it outright."""
        if posted is None:
            await self._db.pool.execute(
                MOVES["call_uncertain"], post_id, attempt, self.settle_seconds
            )
        else:
            await self._db.pool.execute(MOVES["call_refused"], post_id, attempt)

    @translate_errors("The outbox could not be reached")
    async def settle(
        self, post_id: str, attempt: int, outcome: Settlement, ts: str | None = None
    ) -> ClaimAnswer:
        """An "unknown" claim of `attempt` looked in the thread: the post was `found` at
        `ts`, or is an `orphan` stream at `ts` (the row opens), or could not be looked for
        (`unverified`: counted as sent), or is `absent` (the next claim posts it). Returns
        what a claim of the row answers now, by the table (storage/outbox_states.py)."""
        if outcome in ("found", "unverified"):
            await self._db.pool.execute(MOVES[outcome], post_id, ts)
        elif outcome == "orphan":
            await self._db.pool.execute(MOVES[outcome], post_id, attempt, ts)
        else:
            await self._db.pool.execute(MOVES[outcome], post_id, attempt)
        after = moved("sending", outcome)
        assert after is not None, f"{outcome} does not settle an unknown call"
        return answer(after)

    @translate_errors("The outbox could not be reached")
    async def mark_sent(self, post_id: str, remote_ref: str | None) -> None:
        """The post is in the thread (`remote_ref` its ts; None when it could not be
        verified). Not fenced: whichever attempt learns that a post landed says so."""
        await self._db.pool.execute(MOVES["mark_sent"], post_id, remote_ref)

    @translate_errors("The outbox could not be reached")
    async def opened(self, post_id: str, attempt: int, ts: str) -> None:
        """The stream `attempt` started for the row shows at `ts`: the post is visible,
        not yet complete."""
        await self._db.pool.execute(MOVES["opened"], post_id, attempt, ts)

    @translate_errors("The outbox could not be reached")
    async def shown_at(self, post_id: str) -> tuple[PostState, str | None] | None:
        """The row's state and the ts it shows at (None: no row). Not fenced: for display."""
        row = await self._db.pool.fetchrow(_SHOWN, post_id)
        return None if row is None else (row["state"], row["remote_ref"])

    @translate_errors("The outbox could not be reached")
    async def open_ts(self, post_id: str, task_id: str, attempt: int) -> str | None:
        """The ts of the row's open message (None: not open), fenced like a claim: a
        draft being taken back reads it, deletes that message, then `release`s the row."""
        async with self._fenced(task_id, attempt) as conn:
            ts = await conn.fetchval(_OPEN_TS, post_id)
            return None if ts is None else str(ts)

    @translate_errors("The outbox could not be reached")
    async def release(self, post_id: str, task_id: str, attempt: int, ts: str) -> None:
        """The open message `ts` of the row was deleted: the row becomes 'unsent' (posted
        afresh next time). Fenced like a claim. Until this runs, the row stays open and
        whoever publishes it next completes (or, finding it gone, re-posts) the message."""
        async with self._fenced(task_id, attempt) as conn:
            await conn.execute(MOVES["release"], post_id, ts)

    @translate_errors("The outbox could not be reached")
    async def known_refs(self, refs: list[str]) -> set[str]:
        """Which of these message ts some row already accounts for."""
        rows = await self._db.pool.fetch(_KNOWN_REFS, refs)
        return {row["remote_ref"] for row in rows}

    @contextlib.asynccontextmanager
    async def _fenced(self, task_id: str, attempt: int) -> AsyncIterator[Connection]:
        """A transaction that first checks the fence: `Superseded` (and a rollback) when
        `attempt` is not the task's current lease."""
        owner = await self._db.lease_owner()
        async with self._db.pool.acquire() as conn, conn.transaction():
            if not await conn.fetchval(_FENCE, task_id, attempt, owner):
                raise _superseded(task_id, attempt)
            yield conn


def _claimed(state: PostState, row: asyncpg.Record) -> Claim:
    """What a claim that found the row in `state` (and took it over) answers, with what
    the answer needs: where an open message shows, how long an unknown call may land."""
    said = answer(state)
    if said == "open":
        return Claim(said, since=row["first_claimed_at"], ts=row["remote_ref"])
    if said == "unknown":
        return Claim(said, row["wait"], row["first_claimed_at"])
    return Claim(said)


def _superseded(task_id: str, attempt: int) -> Superseded:
    return Superseded(f"attempt {attempt} of task {task_id} is no longer its lease")
