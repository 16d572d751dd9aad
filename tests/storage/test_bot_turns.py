"""Bot turns counted per thread in Postgres (storage/bot_turns.py): every counter at once
gets a place of its own, a turn counted again keeps its place, and turns past the window
no longer count."""

from __future__ import annotations

import asyncio

from storage import Database, count_bot_turn


async def test_turns_counted_at_once_get_places_of_their_own(fresh_db: Database) -> None:
    """Ten turns of one thread counted concurrently get places 1 to 10; another thread
    starts at 1."""
    turns = await asyncio.gather(
        *(
            count_bot_turn(
                fresh_db, task_id=f"t{n}", thread="T1:C1:1.0", bot="B1", window_seconds=60
            )
            for n in range(10)
        )
    )
    assert sorted(t.rank for t in turns) == list(range(1, 11)) and all(t.new for t in turns)
    other = await count_bot_turn(
        fresh_db, task_id="x", thread="T1:C1:2.0", bot="B1", window_seconds=60
    )
    assert other.rank == 1


async def test_a_turn_counted_again_keeps_its_place(fresh_db: Database) -> None:
    """A redelivered turn is not counted twice: it gets its first place back, not new."""
    first = await count_bot_turn(fresh_db, task_id="t", thread="th", bot="B1", window_seconds=60)
    again = await count_bot_turn(fresh_db, task_id="t", thread="th", bot="B1", window_seconds=60)
    assert (first.rank, first.new, again.rank, again.new) == (1, True, 1, False)


async def test_turns_older_than_the_window_no_longer_count(fresh_db: Database) -> None:
    """Once the earlier turns are past the window, the next turn is first again."""
    await count_bot_turn(fresh_db, task_id="old", thread="th", bot="B1", window_seconds=60)
    await fresh_db.pool.execute("UPDATE bot_turns SET at = now() - interval '2 minutes'")
    later = await count_bot_turn(fresh_db, task_id="new", thread="th", bot="B1", window_seconds=60)
    assert later.rank == 1
