"""History: idempotent appends that return the stored row, and a bounded window."""

from __future__ import annotations

from agent import StoredMessage, Task
from storage import Admission, Database, PostgresHistory, admit


async def new_task(db: Database, thread: str, ts: str, text: str) -> Task:
    task = Task(f"T1:C9:{ts}", f"T1:C9:{thread}", {"channel": "C9", "thread_ts": thread})
    assert await admit(db, Admission(None, task.id, task.session_id, task.address, text))
    return task


def reply(task: Task, text: str) -> StoredMessage:
    return StoredMessage(task.reply_id, task.session_id, "assistant", "reply", text)


async def test_append_keeps_the_first_text(db: Database) -> None:
    """A re-run that re-inferred different text gets back the stored text."""
    history = PostgresHistory(db)
    task = await new_task(db, "1.0", "1.0", "question")
    first = await history.append(reply(task, "first answer"), answers=task.user_message_id)
    second = await history.append(reply(task, "second answer"), answers=task.user_message_id)
    assert first.text == second.text == "first answer"


async def test_answer_sorts_after_its_question_not_after_later_questions(db: Database) -> None:
    """Replies are placed right after the turn they answer."""
    history = PostgresHistory(db)
    one = await new_task(db, "2.0", "2.0", "q1")
    two = await new_task(db, "2.0", "2.1", "q2")
    await history.append(reply(one, "a1"), answers=one.user_message_id)
    window = await history.window(two, max_chars=10_000, max_messages=50)
    assert [m.text for m in window] == ["q1", "a1", "q2"]


async def test_window_excludes_later_turns(db: Database) -> None:
    """Answering the first message does not show the model the second."""
    history = PostgresHistory(db)
    one = await new_task(db, "3.0", "3.0", "q1")
    await new_task(db, "3.0", "3.1", "q2")
    window = await history.window(one, max_chars=10_000, max_messages=50)
    assert [m.text for m in window] == ["q1"]


async def test_window_is_bounded_by_the_character_budget(db: Database) -> None:
    """Only the newest messages that fit the budget are shown, always with the turn."""
    history = PostgresHistory(db)
    tasks = [await new_task(db, "4.0", f"4.{n}", f"message {n:02d}") for n in range(20)]
    window = await history.window(tasks[-1], max_chars=35, max_messages=50)
    assert [m.text for m in window] == ["message 17", "message 18", "message 19"]
    tiny = await history.window(tasks[-1], max_chars=1, max_messages=50)
    assert [m.text for m in tiny] == ["message 19"]


async def seed_long_session(db: Database, thread: str, count: int) -> Task:
    """A session with `count` earlier turns, written in one statement, then a new task."""
    session = f"T1:C9:{thread}"
    await db.pool.execute("INSERT INTO sessions (id) VALUES ($1) ON CONFLICT DO NOTHING", session)
    await db.pool.execute(
        "WITH n AS (SELECT g, nextval(pg_get_serial_sequence('messages', 'seq')) AS seq"
        "           FROM generate_series(1, $2) g)"
        " INSERT INTO messages (seq, id, session_id, anchor, role, kind, text)"
        " SELECT seq, 'seed:' || $1 || ':' || g, $1, seq, 'user', 'turn', 'old message ' || g FROM n",
        session,
        count,
    )
    return await new_task(db, thread, f"{thread}1", "the question")


async def test_a_ten_thousand_message_session_loads_the_same_bounded_window(db: Database) -> None:
    """The window of a 10,000-message session is as big as a 10-message one's: the budget's."""
    history = PostgresHistory(db)
    short = await seed_long_session(db, "50.0", 10)
    long = await seed_long_session(db, "60.0", 10_000)
    small = await history.window(short, max_chars=100_000, max_messages=8)
    large = await history.window(long, max_chars=100_000, max_messages=8)
    assert len(small) == len(large) == 8
    assert large[-1].text == "the question" and large[0].text == "old message 9994"
    plan = await db.pool.fetchval(
        "EXPLAIN (FORMAT JSON) SELECT id FROM messages WHERE session_id = $1"
        " AND anchor <= 100000000 ORDER BY anchor DESC, seq DESC LIMIT 8",
        long.session_id,
    )
    assert "messages_window" in str(plan)
