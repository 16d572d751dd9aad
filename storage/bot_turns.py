"""Bot-authored turns counted per thread, for the loop guard (gateway/inbound/bots.py).

Two bots that answer each other's mentions would talk for ever, each turn a model call.
`count_bot_turn` gives each bot turn its place in its thread's window — the turns counted
there in the last `window_seconds`, itself included — in one transaction that takes the
thread's advisory lock first, so two replicas counting turns of one thread at once get
places 1 and 2, never 1 and 1. A turn counted already (Slack's redelivery, or its
`message` twin) keeps the place it got: the guard's answer does not change on a retry,
and the turn past the bound is the one that alerts, once.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.database import Database
from storage.errors import translate_errors

_LOCK = "SELECT pg_advisory_xact_lock(hashtext('bot_turns:' || $1))"

_KNOWN = "SELECT rank FROM bot_turns WHERE task_id = $1"

_PRUNE = """
DELETE FROM bot_turns WHERE thread = $1 AND at < now() - make_interval(secs => $2)
"""

_COUNT = """
INSERT INTO bot_turns (task_id, thread, bot, rank)
SELECT $1, $2, $3, count(*) + 1 FROM bot_turns WHERE thread = $2
RETURNING rank
"""


@dataclass(frozen=True, slots=True)
class BotTurn:
    """A bot turn's place in its thread's window, and whether this call counted it."""

    rank: int
    new: bool


@translate_errors("The bot turn could not be counted")
async def count_bot_turn(
    db: Database, *, task_id: str, thread: str, bot: str, window_seconds: float
) -> BotTurn:
    """Count the turn `task_id` in `thread` (module docstring); its place in the window."""
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute(_LOCK, thread)
        known = await conn.fetchval(_KNOWN, task_id)
        if known is not None:
            return BotTurn(int(known), new=False)
        await conn.execute(_PRUNE, thread, window_seconds)
        rank = await conn.fetchval(_COUNT, task_id, thread, bot)
        return BotTurn(int(rank), new=True)
