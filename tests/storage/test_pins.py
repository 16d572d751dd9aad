"""Pins on Postgres: the window always shows pinned messages (newest pins win, up to the
cap), a retained message is kept only while pinned, and the window stays bounded."""

from __future__ import annotations

from storage import Database, PinnedMessage, PostgresHistory, clear_pin, flag_pin, retain_pin
from tests.storage.test_history import new_task, seed_long_session


def pin_of(thread: str, ts: str) -> PinnedMessage:
    where = f"T1:C9:{ts}"
    return PinnedMessage(
        f"T1:C9:{thread}", ts, (f"task:{where}:user", f"slack:{where}"), f"slack:{where}"
    )


async def test_a_pinned_turn_is_in_the_window_of_a_long_thread(db: Database) -> None:
    """Ten thousand messages later, the pinned first question is still shown, marked, before
    the recent ones; the window is otherwise what it was."""
    history = PostgresHistory(db)
    first = await new_task(db, "80.0", "80.0", "the first question")
    task = await seed_long_session(db, "80.0", 10_000)
    assert await flag_pin(db, pin_of("80.0", "80.0"), max_pinned=10)
    window = await history.window(task, max_chars=100_000, max_messages=8)
    assert [m.text for m in window][:2] == ["the first question", "old message 9994"]
    assert window[0].pinned and window[0].id == first.user_message_id
    assert len(window) == 9 and not any(m.pinned for m in window[1:])


async def test_the_newest_pins_win_beyond_the_cap(db: Database) -> None:
    """With a cap of 2, pinning a third message unpins the oldest pin (and the budget left
    after the pins shows only the task's own turn)."""
    tasks = [await new_task(db, "81.0", f"81.{n}", f"question {n}") for n in range(4)]
    for n in range(3):
        assert await flag_pin(db, pin_of("81.0", f"81.{n}"), max_pinned=2)
    window = await PostgresHistory(db, max_pinned=2).window(tasks[3], max_chars=25, max_messages=50)
    assert [(m.text[-1], m.pinned) for m in window] == [("1", True), ("2", True), ("3", False)]


async def test_a_retained_message_lives_only_while_pinned(db: Database) -> None:
    """A message we never stored is kept with its pin, shown first, and deleted on unpin;
    a pin in a session we do not keep stores nothing."""
    history = PostgresHistory(db)
    task = await new_task(db, "82.0", "82.0", "q")
    pin = pin_of("82.0", "81.9")
    assert await retain_pin(db, pin, "<turn>someone said</turn>", max_pinned=10)
    window = await history.window(task, max_chars=10_000, max_messages=50)
    assert [(m.text, m.pinned) for m in window] == [
        ("<turn>someone said</turn>", True),
        ("q", False),
    ]
    assert await clear_pin(db, pin)
    assert [m.text for m in await history.window(task, max_chars=10_000, max_messages=50)] == ["q"]
    assert not await retain_pin(db, pin_of("83.0", "83.0"), "x", max_pinned=10)
    assert not await clear_pin(db, pin)  # a second unpin finds nothing
