"""Pins on Postgres: the window always shows pinned messages (newest pins win, up to the
cap) with their turns, a retained message is kept only while pinned, a pin pushed out by
the cap is named, and the window stays bounded."""

from __future__ import annotations

from agent import Task
from storage import (
    Database,
    PinnedMessage,
    PostgresHistory,
    PostgresSummaries,
    clear_pin,
    flag_pin,
    retain_pin,
)
from tests.storage.test_history import new_task, reply, seed_long_session


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


async def our_reply_posted(db: Database, task: Task, text: str, ts: str) -> None:
    """The task's reply stored, and posted with Slack ts `ts` (its outbox row)."""
    await PostgresHistory(db).append(reply(task, text), answers=task.user_message_id)
    await db.pool.execute(
        "INSERT INTO outbox (id, state, remote_ref) VALUES ($1, 'sent', $2)", task.reply_id, ts
    )


async def test_a_pinned_answer_keeps_its_question_and_unpinning_lets_both_go(
    db: Database,
) -> None:
    """Pinning our answer (found by its post's ts) keeps the question it answered in a long
    thread's window, both marked; only the answer is flagged, and its unpin clears both."""
    history = PostgresHistory(db)
    first = await new_task(db, "84.0", "84.0", "what is the code?")
    await our_reply_posted(db, first, "the code is PELICAN", "84.5")
    task = await seed_long_session(db, "84.0", 500)
    pin = pin_of("84.0", "84.5")
    assert await flag_pin(db, pin, max_pinned=10)
    window = await history.window(task, max_chars=100_000, max_messages=4)
    assert [(m.text, m.pinned) for m in window][:2] == [
        ("what is the code?", True),
        ("the code is PELICAN", True),
    ]
    flagged = "SELECT id FROM messages WHERE session_id = $1 AND pinned"
    assert [r["id"] for r in await db.pool.fetch(flagged, task.session_id)] == [first.reply_id]
    assert await clear_pin(db, pin)
    window = await history.window(task, max_chars=100_000, max_messages=4)
    assert not any("code" in m.text for m in window)


async def test_a_pinned_question_keeps_its_answer(db: Database) -> None:
    """Pinning a person's question keeps our answer to it in view too."""
    first = await new_task(db, "85.0", "85.0", "budget?")
    await PostgresHistory(db).append(reply(first, "42k"), answers=first.user_message_id)
    task = await seed_long_session(db, "85.0", 50)
    assert await flag_pin(db, pin_of("85.0", "85.0"), max_pinned=10)
    window = await PostgresHistory(db).window(task, max_chars=100_000, max_messages=3)
    assert [m.text for m in window][:2] == ["budget?", "42k"]


async def test_the_cap_counts_pins_and_says_which_fell_out(db: Database) -> None:
    """With a cap of 2, two pinned turns (four messages) are both kept; the third pin
    pushes out the oldest and says so, once: a redelivered pin pushes nothing out."""
    tasks = [await new_task(db, "86.0", f"86.{n}", f"question {n}") for n in range(4)]
    for t in tasks[:3]:
        await PostgresHistory(db).append(reply(t, f"answer {t.id[-1]}"), answers=t.user_message_id)
    for n in range(2):
        assert (await flag_pin(db, pin_of("86.0", f"86.{n}"), max_pinned=2)).unpinned == ()
    window = await PostgresHistory(db, max_pinned=2).window(tasks[3], max_chars=60, max_messages=50)
    assert [m.text for m in window if m.pinned] == [
        "question 0",
        "answer 0",
        "question 1",
        "answer 1",
    ]
    third = await flag_pin(db, pin_of("86.0", "86.2"), max_pinned=2)
    assert third.kept and [(u.id, u.text) for u in third.unpinned] == [
        (tasks[0].user_message_id, "question 0")
    ]
    again = await flag_pin(db, pin_of("86.0", "86.2"), max_pinned=2)
    assert again.kept and again.unpinned == ()


async def test_a_retained_pin_pushed_out_is_named_and_deleted(db: Database) -> None:
    """A message kept only for its pin that falls out is named by the pin that pushed it,
    and deleted."""
    task = await new_task(db, "87.0", "87.0", "q")
    assert await retain_pin(db, pin_of("87.0", "86.9"), "<turn>old words</turn>", max_pinned=1)
    pushed = await retain_pin(db, pin_of("87.0", "86.8"), "<turn>new words</turn>", max_pinned=1)
    assert [u.text for u in pushed.unpinned] == ["<turn>old words</turn>"]
    count = "SELECT count(*) FROM messages WHERE session_id = $1 AND provenance = 'pin'"
    assert await db.pool.fetchval(count, task.session_id) == 1


async def test_a_pinned_turn_is_not_summarized(db: Database) -> None:
    """Compaction reads around a pinned turn: the window shows it whole already."""
    tasks = [await new_task(db, "88.0", f"88.{n}", f"question {n}") for n in range(4)]
    for t in tasks[:3]:
        await PostgresHistory(db).append(reply(t, f"answer {t.id[-1]}"), answers=t.user_message_id)
    assert await flag_pin(db, pin_of("88.0", "88.1"), max_pinned=10)
    overflow = await PostgresSummaries(db).overflow(
        tasks[3], edge_id=tasks[3].user_message_id, max_chars=10_000, max_messages=50
    )
    assert overflow is not None
    assert [m.text for m in overflow.messages] == [
        "question 0",
        "answer 0",
        "question 2",
        "answer 2",
    ]
