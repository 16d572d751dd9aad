"""Feedback on replies: one vote per person and reply, and the report per prompt and model.

A click on a reply's feedback buttons (gateway/inbound/interactions.py) is stored by
`record_vote` in one statement: an upsert on (reply, person), so a second click changes
that person's vote rather than adding one, carrying the prompt epoch and route the reply
was stamped with (storage/memory.py) so the report reads one table. What it answers —
a new vote, a changed one, the same again, or no such reply — is what the gateway counts
(`threadgate_feedback_total{value}` counts votes cast and changed, not repeats).

`feedback_report` gives, per prompt epoch and model, how many votes are positive and
negative and the positive share (`threadgate feedback`); `votes_of` lists a task's votes
(`threadgate tasks show`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeAlias

from storage.database import Database
from storage.errors import translate_errors

Vote: TypeAlias = Literal["positive", "negative"]
Recorded: TypeAlias = Literal["new", "changed", "same", "unknown"]
VOTES: tuple[Vote, ...] = ("positive", "negative")

# `old` reads the vote before this statement; `cast` writes it unless it is the same.
_RECORD = """
WITH reply AS (
    SELECT id, prompt_epoch, route_provider, route_model, route_slot
    FROM messages WHERE id = $1 AND kind = 'reply'
), old AS (
    SELECT value FROM reply_feedback WHERE message_id = $1 AND user_id = $2
), cast_vote AS (
    INSERT INTO reply_feedback (message_id, user_id, value, prompt_epoch, route_provider,
                                route_model, route_slot)
    SELECT r.id, $2, $3, r.prompt_epoch, r.route_provider, r.route_model, r.route_slot
    FROM reply r
    ON CONFLICT (message_id, user_id) DO UPDATE
    SET value = excluded.value, updated_at = now()
    WHERE reply_feedback.value <> excluded.value
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM reply) AS known, (SELECT value FROM old) AS old,
       EXISTS (SELECT 1 FROM cast_vote) AS written
"""

_REPORT = """
SELECT prompt_epoch, route_provider, route_model,
       count(*) FILTER (WHERE value = 'positive') AS positive,
       count(*) FILTER (WHERE value = 'negative') AS negative
FROM reply_feedback
GROUP BY prompt_epoch, route_provider, route_model
ORDER BY max(updated_at) DESC
"""

_OF_TASK = """
SELECT message_id, user_id, value, prompt_epoch, route_provider, route_model, created_at,
       updated_at
FROM reply_feedback WHERE message_id = $1 ORDER BY created_at, user_id
"""


@dataclass(frozen=True, slots=True)
class FeedbackLine:
    """Votes on the replies of one prompt epoch and model (None: not recorded)."""

    prompt_epoch: str | None
    provider: str | None
    model: str | None
    positive: int
    negative: int

    @property
    def ratio(self) -> float:
        """The positive share of the votes (0 to 1)."""
        total = self.positive + self.negative
        return self.positive / total if total else 0.0


@dataclass(frozen=True, slots=True)
class StoredVote:
    """One person's vote on a reply, as `threadgate tasks show` lists it."""

    message_id: str
    user_id: str
    value: str
    prompt_epoch: str | None
    route_provider: str | None
    route_model: str | None
    created_at: datetime
    updated_at: datetime


@translate_errors("The feedback could not be stored")
async def record_vote(db: Database, reply_id: str, user_id: str, value: Vote) -> Recorded:
    """Store `user_id`'s vote on the reply `reply_id` (one per person and reply)."""
    row = await db.pool.fetchrow(_RECORD, reply_id, user_id, value)
    assert row is not None  # the statement always answers one row
    if not row["known"]:
        return "unknown"
    if not row["written"]:
        return "same"
    return "new" if row["old"] is None else "changed"


@translate_errors("The feedback could not be read")
async def feedback_report(db: Database) -> list[FeedbackLine]:
    """Votes per prompt epoch and model, the most recently voted first."""
    return [
        FeedbackLine(
            r["prompt_epoch"], r["route_provider"], r["route_model"], r["positive"], r["negative"]
        )
        for r in await db.pool.fetch(_REPORT)
    ]


@translate_errors("The feedback could not be read")
async def votes_of(db: Database, reply_id: str) -> list[StoredVote]:
    """The votes on one reply, oldest first."""
    return [StoredVote(**dict(r)) for r in await db.pool.fetch(_OF_TASK, reply_id)]
