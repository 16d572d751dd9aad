"""Slack's reads, paced for every replica: a budget per workspace and method, and the read
tier each workspace was found in.

Slack limits `conversations.replies` and `conversations.history` per method, per workspace,
per app — a commercially distributed app outside the Marketplace to one call a minute
(and 15 messages a page) — and every replica of a deployment calls as the same app. So the
budget is a row in Postgres (migration 025) holding the earliest time the next call of a
method may be made in a workspace. `take_read` is one conditional upsert: it moves that
time on by the tier's interval when it has come (the call may go), and otherwise says how
long until it comes; of two replicas taking at once, the one that waited on the row's lock
finds it moved on. `push_read` moves it to what a `ratelimited` answer's Retry-After
asked, so that no replica asks again before. Times are the database's `now()`: one clock
for every replica.

Both run on the admission connections (`Database.admissions`): a read is taken before an
ack, which must not wait behind reply work for a connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeAlias, get_args

from storage.database import Database
from storage.errors import translate_errors

ReadTier: TypeAlias = Literal["internal", "limited"]
READ_TIERS: tuple[ReadTier, ...] = get_args(ReadTier)

# $3 the tier's interval in seconds. The outer SELECT reads the snapshot from before the
# upsert: when the call was not taken there, `wait` is the row that refused it (or 0 when
# the winner committed after that snapshot: the caller asks again).
_TAKE = """
WITH taken AS (
    INSERT INTO slack_read_budgets AS b (team, method, next_at)
    VALUES ($1, $2, now() + make_interval(secs => $3::float8))
    ON CONFLICT (team, method)
    DO UPDATE SET next_at = now() + make_interval(secs => $3::float8)
    WHERE b.next_at <= now()
    RETURNING true AS taken
)
SELECT EXISTS (SELECT 1 FROM taken) AS taken,
       greatest(coalesce((SELECT extract(epoch FROM b.next_at - now()) FROM slack_read_budgets b
                          WHERE b.team = $1 AND b.method = $2), 0), 0)::float8 AS wait
"""

_PUSH = """
INSERT INTO slack_read_budgets AS b (team, method, next_at)
VALUES ($1, $2, now() + make_interval(secs => $3::float8))
ON CONFLICT (team, method) DO UPDATE SET next_at = greatest(b.next_at, excluded.next_at)
"""

# `limited` once found stays; `internal` is only ever the first word.
_FOUND = """
INSERT INTO slack_read_tiers AS t (team, tier, evidence) VALUES ($1, $2, $3)
ON CONFLICT (team) DO UPDATE SET tier = excluded.tier, evidence = excluded.evidence,
                                 found_at = now()
WHERE t.tier <> excluded.tier AND excluded.tier = 'limited'
"""


@dataclass(frozen=True, slots=True)
class TakenRead:
    """Whether a read may be made now (`taken`), else in how many seconds (`wait`)."""

    taken: bool
    wait: float = 0.0


@dataclass(frozen=True, slots=True)
class FoundTier:
    """The read tier a workspace was found in, what showed it, and when."""

    team: str
    tier: ReadTier
    evidence: str
    found_at: datetime


@translate_errors("The Slack read budget could not be reached")
async def take_read(db: Database, team: str, method: str, interval: float) -> TakenRead:
    """Take the next call of `method` in `team`'s workspace, `interval` seconds before the
    one after it, if its time has come; else say how long until it comes."""
    row = await db.admissions.fetchrow(_TAKE, team, method, interval)
    assert row is not None
    return TakenRead(True) if row["taken"] else TakenRead(False, float(row["wait"]))


@translate_errors("The Slack read budget could not be reached")
async def push_read(db: Database, team: str, method: str, seconds: float) -> None:
    """No call of `method` in `team`'s workspace for `seconds` from now (Slack said so)."""
    await db.admissions.execute(_PUSH, team, method, seconds)


@translate_errors("The Slack read tier could not be reached")
async def read_tier_of(db: Database, team: str) -> ReadTier | None:
    """The tier `team`'s workspace was found in; None: not found yet."""
    found = await db.admissions.fetchval("SELECT tier FROM slack_read_tiers WHERE team = $1", team)
    return next((t for t in READ_TIERS if t == found), None)


@translate_errors("The Slack read tier could not be stored")
async def found_read_tier(db: Database, team: str, tier: ReadTier, evidence: str) -> bool:
    """Remember that `team`'s workspace reads in `tier`, shown by `evidence`; whether that
    changed what was known (`limited`, once found, stays)."""
    status = await db.admissions.execute(_FOUND, team, tier, evidence)
    return status.endswith(" 1")


@translate_errors("The Slack read tiers could not be read")
async def found_read_tiers(db: Database) -> list[FoundTier]:
    """Every workspace's tier as found, by team."""
    rows = await db.pool.fetch(
        "SELECT team, tier, evidence, found_at FROM slack_read_tiers ORDER BY team"
    )
    return [
        FoundTier(r["team"], tier, r["evidence"], r["found_at"])
        for r in rows
        if (tier := next((t for t in READ_TIERS if t == r["tier"]), None)) is not None
    ]
