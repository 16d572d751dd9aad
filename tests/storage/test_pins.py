"""Pins on Postgres: the window shows pinned messages with their turns while they fit its
room and lists the others (none is dropped), a retained message is kept only while
pinned, a pin that moves pins to the list names them once, and the window stays bounded."""

from __future__ import annotations

from agent import Task
from storage import (
    Database,
    PinnedMessage,
    PinRoom,
    PostgresHistory,
    PostgresSummaries,
    clear_pin,
    flag_pin,
    retain_pin,
)
from storage.history import MAX_LISTED_PINS
from tests.storage.test_history import new_task, reply, seed_long_session

ROOM = PinRoom(10, 50_000)


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
    assert await flag_pin(db, pin_of("80.0", "80.0"), room=ROOM)
    window = await history.window(task, max_chars=100_000, max_messages=8)
    assert [m.text for m in window][:2] == ["the first question", "old message 9994"]
    assert window[0].pinned and window[0].id == first.user_message_id
    assert len(window) == 9 and not any(m.pinned for m in window[1:])


async def test_no_pin_is_dropped_past_the_count_the_oldest_is_listed(db: Database) -> None:
    """Before: with a cap of 2, a third pin unpinned the oldest. Now the two newest are
    shown whole and the oldest is listed (still flagged), with the words it starts with."""
    tasks = [await new_task(db, "81.0", f"81.{n}", f"question {n}") for n in range(4)]
    for n in range(3):
        assert await flag_pin(db, pin_of("81.0", f"81.{n}"), room=PinRoom(2, 50_000))
    window = await PostgresHistory(db, max_pinned=2).window(tasks[3], max_chars=45, max_messages=50)
    assert [(m.text[-1], m.pinned) for m in window] == [("1", True), ("2", True), ("3", False)]
    assert [(m.id, m.text) for m in window.pins.messages] == [
        (tasks[0].user_message_id, "question 0")
    ]
    assert not window.pins.more
    flagged = "SELECT count(*) FROM messages WHERE session_id = $1 AND pinned"
    assert await db.pool.fetchval(flagged, tasks[0].session_id) == 3


async def test_pins_past_the_room_in_characters_are_listed(db: Database) -> None:
    """Pins are shown whole within the window's characters, newest first; a long older one
    that no longer fits is listed, a short one still fitting after it is shown."""
    texts = ["short old", "x" * 700, "short new"]
    tasks = [await new_task(db, "79.0", f"79.{n}", t) for n, t in enumerate([*texts, "now"])]
    for n in range(3):
        assert await flag_pin(db, pin_of("79.0", f"79.{n}"), room=ROOM)
    window = await PostgresHistory(db).window(tasks[3], max_chars=600, max_messages=50)
    assert [m.text for m in window] == ["short old", "short new", "now"]
    assert [m.id for m in window.pins.messages] == [tasks[1].user_message_id]


async def test_pins_past_what_can_be_listed_are_said_to_exist(db: Database) -> None:
    """More pins than the window shows and lists: the listing says there are more."""
    count = 10 + MAX_LISTED_PINS + 2
    tasks = [await new_task(db, "78.0", f"78.{n:02}", f"q{n}") for n in range(count + 1)]
    for n in range(count):
        assert await flag_pin(db, pin_of("78.0", f"78.{n:02}"), room=ROOM)
    window = await PostgresHistory(db).window(tasks[-1], max_chars=100_000, max_messages=5)
    assert sum(m.pinned for m in window) == 10
    assert len(window.pins.messages) == MAX_LISTED_PINS and window.pins.more
    assert window.pins.messages[0].text == f"q{count - 11}"  # the newest of the listed first


async def test_a_retained_message_lives_only_while_pinned(db: Database) -> None:
    """A message we never stored is kept with its pin, shown first, and deleted on unpin;
    a pin in a session we do not keep stores nothing."""
    history = PostgresHistory(db)
    task = await new_task(db, "82.0", "82.0", "q")
    pin = pin_of("82.0", "81.9")
    assert await retain_pin(db, pin, "<turn>someone said</turn>", room=ROOM)
    window = await history.window(task, max_chars=10_000, max_messages=50)
    assert [(m.text, m.pinned) for m in window] == [
        ("<turn>someone said</turn>", True),
        ("q", False),
    ]
    assert await clear_pin(db, pin)
    assert [m.text for m in await history.window(task, max_chars=10_000, max_messages=50)] == ["q"]
    assert not await retain_pin(db, pin_of("83.0", "83.0"), "x", room=ROOM)
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
    assert await flag_pin(db, pin, room=ROOM)
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
    assert await flag_pin(db, pin_of("85.0", "85.0"), room=ROOM)
    window = await PostgresHistory(db).window(task, max_chars=100_000, max_messages=3)
    assert [m.text for m in window][:2] == ["budget?", "42k"]


async def test_a_pin_that_moves_pins_to_the_list_says_which_once(db: Database) -> None:
    """With room for two pinned turns (four messages), two pins move nothing; the third
    moves the oldest to the list and says so, once: a redelivered pin moves nothing."""
    room = PinRoom(2, 50_000)
    tasks = [await new_task(db, "86.0", f"86.{n}", f"question {n}") for n in range(4)]
    for t in tasks[:3]:
        await PostgresHistory(db).append(reply(t, f"answer {t.id[-1]}"), answers=t.user_message_id)
    for n in range(2):
        assert (await flag_pin(db, pin_of("86.0", f"86.{n}"), room=room)).listed == ()
    window = await PostgresHistory(db, max_pinned=2).window(
        tasks[3], max_chars=120, max_messages=50
    )
    assert [m.text for m in window if m.pinned] == [
        "question 0",
        "answer 0",
        "question 1",
        "answer 1",
    ]
    third = await flag_pin(db, pin_of("86.0", "86.2"), room=room)
    assert third.kept and [(u.id, u.text) for u in third.listed] == [
        (tasks[0].user_message_id, "question 0")
    ]
    again = await flag_pin(db, pin_of("86.0", "86.2"), room=room)
    assert again.kept and again.listed == ()


async def test_a_pin_too_large_for_the_room_lists_itself_and_is_kept(db: Database) -> None:
    """A retained pin whose turn does not fit the room is kept, and names itself as listed;
    nothing older moves."""
    task = await new_task(db, "87.0", "87.0", "q")
    room = PinRoom(2, 100)
    assert (
        await retain_pin(db, pin_of("87.0", "86.9"), "<turn>old</turn>", room=room)
    ).listed == ()
    big = await retain_pin(db, pin_of("87.0", "86.8"), f"<turn>{'w' * 200}</turn>", room=room)
    assert [u.id for u in big.listed] == ["slack:T1:C9:86.8"]
    count = "SELECT count(*) FROM messages WHERE session_id = $1 AND provenance = 'pin'"
    assert await db.pool.fetchval(count, task.session_id) == 2


async def test_a_pinned_turn_is_not_summarized(db: Database) -> None:
    """Compaction reads around a pinned turn: the window shows it whole already."""
    tasks = [await new_task(db, "88.0", f"88.{n}", f"question {n}") for n in range(4)]
    for t in tasks[:3]:
        await PostgresHistory(db).append(reply(t, f"answer {t.id[-1]}"), answers=t.user_message_id)
    assert await flag_pin(db, pin_of("88.0", "88.1"), room=ROOM)
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
