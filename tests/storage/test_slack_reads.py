"""Slack's read budget in Postgres: one call per interval per workspace and method, for
every replica together; a `ratelimited` answer pushes it; the tier found is remembered."""

from __future__ import annotations

import asyncio

from storage import (
    Database,
    found_read_tier,
    found_read_tiers,
    push_read,
    read_tier_of,
    take_read,
)

REPLIES = "conversations.replies"


async def test_a_read_is_taken_once_per_interval_and_says_how_long_to_wait(db: Database) -> None:
    """The first call of a method is taken; the next within the interval is not, and is
    told about how long until it may be; another method or workspace is not held."""
    first = await take_read(db, "T0TAKE", REPLIES, 60)
    second = await take_read(db, "T0TAKE", REPLIES, 60)
    assert first.taken and not second.taken
    assert 55 < second.wait <= 60
    assert (await take_read(db, "T0TAKE", "conversations.history", 60)).taken
    assert (await take_read(db, "T0TAKE2", REPLIES, 60)).taken


async def test_many_replicas_taking_at_once_take_one_call(database_dsn: str) -> None:
    """Ten takes at the same moment, each on a connection of its own (as replicas are):
    exactly one call is taken."""
    async with Database(database_dsn, min_size=10, max_size=10) as wide:
        taken = await asyncio.gather(*(take_read(wide, "T0RACE", REPLIES, 60) for _ in range(10)))
    assert sum(t.taken for t in taken) == 1


async def test_a_ratelimited_answer_holds_every_replica_until_its_retry_after(
    db: Database,
) -> None:
    """After a push of Retry-After seconds, no call is taken before they pass, even one
    whose interval has; a shorter push never shortens the wait."""
    assert (await take_read(db, "T0PUSH", REPLIES, 0)).taken
    await push_read(db, "T0PUSH", REPLIES, 60)
    await push_read(db, "T0PUSH", REPLIES, 1)
    refused = await take_read(db, "T0PUSH", REPLIES, 0)
    assert not refused.taken and refused.wait > 55


async def test_the_limited_tier_once_found_stays(db: Database) -> None:
    """A workspace found limited stays limited; `internal` is recorded only as a first
    word, and the list names what showed each."""
    assert await read_tier_of(db, "T0TIER") is None
    assert await found_read_tier(db, "T0TIER", "internal", "first read")
    assert await found_read_tier(db, "T0TIER", "limited", "a capped page")
    assert not await found_read_tier(db, "T0TIER", "internal", "later")
    assert await read_tier_of(db, "T0TIER") == "limited"
    (found,) = [t for t in await found_read_tiers(db) if t.team == "T0TIER"]
    assert found.evidence == "a capped page"
