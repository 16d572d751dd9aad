"""Operator alert windows in Postgres: one alert per kind per window, for every replica."""

from __future__ import annotations

import asyncio

from storage import Database, PostgresAlertThrottle

WINDOW = {"window_seconds": 900.0, "send_seconds": 60.0}


async def test_the_first_failure_opens_the_window_and_repeats_are_counted(db: Database) -> None:
    """The first failure of a kind sends its alert; the next ones in the window are
    repeats of that window, and the next window's alert says how many there were."""
    throttle = PostgresAlertThrottle(db)
    first = await throttle.note("counted", **WINDOW)
    repeats = [await throttle.note("counted", **WINDOW) for _ in range(3)]
    await throttle.settle(first, "sent")
    assert first.ours and first.suppressed == 0
    assert not any(r.ours for r in repeats) and {r.claim for r in repeats} == {first.claim}
    after = await throttle.note("counted", window_seconds=0, send_seconds=60)
    assert after.ours and after.suppressed == 3 and after.claim != first.claim


async def test_failures_from_many_connections_at_once_open_one_window(database_dsn: str) -> None:
    """Ten failures at the same moment, each on a connection of its own (as replicas
    are): one of them opens the window, nine count as repeats."""
    async with Database(database_dsn, min_size=10, max_size=10) as wide:
        throttle = PostgresAlertThrottle(wide)
        turns = await asyncio.gather(*(throttle.note("racing", **WINDOW) for _ in range(10)))
    assert sum(t.ours for t in turns) == 1
    assert len({t.claim for t in turns}) == 1


async def test_a_window_whose_alert_failed_is_opened_again(db: Database) -> None:
    """An alert that could not be sent does not hold the window: the next failure sends
    one, saying the repeats it missed; the first seen time is kept."""
    throttle = PostgresAlertThrottle(db)
    first = await throttle.note("failing", **WINDOW)
    await throttle.note("failing", **WINDOW)
    await throttle.settle(first, "failed")
    again = await throttle.note("failing", **WINDOW)
    assert again.ours and again.suppressed == 1 and again.first_seen == first.first_seen
    assert await throttle.outcome(first) == "failed"  # its window was opened again


async def test_a_logged_alert_holds_its_window(db: Database) -> None:
    """With nowhere to send it, the alert is only logged and the window holds (the log
    stays quiet); repeats learn that nobody was told."""
    throttle = PostgresAlertThrottle(db)
    first = await throttle.note("logged", **WINDOW)
    await throttle.settle(first, "logged")
    repeat = await throttle.note("logged", **WINDOW)
    assert not repeat.ours and await throttle.outcome(repeat) == "logged"


async def test_the_outcome_is_unknown_while_the_alert_is_being_sent(db: Database) -> None:
    """A repeat asking while the window's alert is on its way hears None, then "sent"."""
    throttle = PostgresAlertThrottle(db)
    first = await throttle.note("sending", **WINDOW)
    repeat = await throttle.note("sending", **WINDOW)
    assert await throttle.outcome(repeat) is None
    await throttle.settle(first, "sent")
    assert await throttle.outcome(repeat) == "sent"


async def test_an_alert_sending_too_long_is_taken_over_and_its_late_settle_is_ignored(
    db: Database,
) -> None:
    """A sender that died mid-send does not hold the window: past `send_seconds` the next
    failure opens it again, and the dead sender's settle, arriving late, changes nothing."""
    throttle = PostgresAlertThrottle(db)
    stuck = await throttle.note("stuck", **WINDOW)
    taken = await throttle.note("stuck", window_seconds=900, send_seconds=0)
    await throttle.settle(stuck, "sent")
    assert taken.ours and taken.claim != stuck.claim
    assert await throttle.outcome(taken) is None


async def test_kinds_have_windows_of_their_own(db: Database) -> None:
    """A refused key on one route does not hold back the alert of another."""
    throttle = PostgresAlertThrottle(db)
    one = await throttle.note("kind-one", **WINDOW)
    two = await throttle.note("kind-two", **WINDOW)
    assert one.ours and two.ours
