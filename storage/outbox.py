"""The outbox: one row per outgoing post, so each post reaches Slack once.

Before posting, a publisher claims the row. A first claim means "post it". A claim that
finds an earlier, unfinished attempt means the outcome of that attempt is unknown (the
process died after sending, or the response was lost): the publisher must look for the
post in the conversation before posting again. A finished row means "already done".
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from storage.database import Database
from storage.errors import translate_errors

Claim: TypeAlias = Literal["new", "unknown", "sent"]

_CLAIM = """
INSERT INTO outbox (id, state) VALUES ($1, 'sending')
ON CONFLICT (id) DO UPDATE SET attempts = outbox.attempts + 1, updated_at = now()
RETURNING state, attempts
"""


class Outbox:
    def __init__(self, db: Database) -> None:
        self._db = db

    @translate_errors("The outbox could not be reached")
    async def claim(self, post_id: str) -> Claim:
        row = await self._db.pool.fetchrow(_CLAIM, post_id)
        assert row is not None
        if row["state"] == "sent":
            return "sent"
        return "new" if row["attempts"] == 1 else "unknown"

    @translate_errors("The outbox could not be reached")
    async def mark_sent(self, post_id: str, remote_ref: str | None) -> None:
        await self._db.pool.execute(
            "UPDATE outbox SET state = 'sent', remote_ref = $2, updated_at = now() WHERE id = $1",
            post_id,
            remote_ref,
        )
