"""Summaries on Postgres: what the window no longer shows, in whole turns; a stored summary
is shown first and the window goes on after what it covers; summaries roll forward."""

from __future__ import annotations

from agent import Summary, prompt_epoch
from storage import Database, PostgresHistory, PostgresSummaries
from tests.storage.test_history import new_task, reply

EPOCH = prompt_epoch("The prompt summaries are written for.")


async def test_overflow_is_what_the_window_drops_in_whole_turns(db: Database) -> None:
    """Older than the window's oldest message, oldest first, questions with their answers;
    a budget that ends inside a turn ends before it."""
    history = PostgresHistory(db)
    summaries = PostgresSummaries(db)
    tasks = [await new_task(db, "90.0", f"90.{n}", f"question {n}") for n in range(5)]
    for t in tasks[:4]:
        await history.append(reply(t, f"answer {t.id[-1]}"), answers=t.user_message_id)
    window = await history.window(tasks[4], max_chars=30, max_messages=50)
    assert [m.text for m in window] == ["question 3", "answer 3", "question 4"]
    edge = window[0].id
    overflow = await summaries.overflow(tasks[4], edge_id=edge, max_chars=1_000, max_messages=50)
    assert overflow is not None and overflow.previous is None
    assert [m.text for m in overflow.messages] == [
        "question 0",
        "answer 0",
        "question 1",
        "answer 1",
        "question 2",
        "answer 2",
    ]
    cut = await summaries.overflow(tasks[4], edge_id=edge, max_chars=25, max_messages=50)
    assert cut is not None and [m.text for m in cut.messages] == ["question 0", "answer 0"]
    limited = await summaries.overflow(tasks[4], edge_id=edge, max_chars=1_000, max_messages=3)
    assert limited is not None and [m.text for m in limited.messages] == ["question 0", "answer 0"]


async def test_a_summary_is_shown_first_and_the_next_one_rolls_forward(db: Database) -> None:
    """The window starts with the summary and shows only what follows it; the next overflow
    starts after it and hands back its text, and the new summary covers both."""
    history = PostgresHistory(db)
    summaries = PostgresSummaries(db)
    tasks = [await new_task(db, "91.0", f"91.{n}", f"question {n}") for n in range(6)]
    first = await summaries.overflow(
        tasks[5], edge_id=tasks[3].user_message_id, max_chars=1_000, max_messages=50
    )
    assert first is not None and [m.text for m in first.messages][-1] == "question 2"
    await summaries.store_summary(
        tasks[5].session_id, Summary(first.covers_from, first.covers_to, "S1"), EPOCH
    )
    window = await history.window(tasks[5], max_chars=10_000, max_messages=50)
    assert [(m.kind, m.text) for m in window][:2] == [("summary", "S1"), ("turn", "question 3")]
    assert len(window) == 4
    second = await summaries.overflow(
        tasks[5], edge_id=tasks[5].user_message_id, max_chars=1_000, max_messages=50
    )
    assert second is not None and second.previous == "S1"
    assert second.covers_from == first.covers_from
    assert [m.text for m in second.messages] == ["question 3", "question 4"]
    nothing = await summaries.overflow(
        tasks[3], edge_id=tasks[0].user_message_id, max_chars=1_000, max_messages=50
    )
    assert nothing is None


async def test_a_complete_window_leaves_nothing_for_compaction_to_read(db: Database) -> None:
    """Whatever the budget, a window that says it is complete shows every message before
    the task's turn that no summary covers; one with room for everything says so, with a
    summary shown first too."""
    history = PostgresHistory(db)
    summaries = PostgresSummaries(db)
    tasks = [await new_task(db, "92.0", f"92.{n}", f"question {n}") for n in range(6)]
    for t in tasks[:5]:
        await history.append(reply(t, f"answer {t.id[-1]}"), answers=t.user_message_id)
    last = tasks[5]

    async def check(max_chars: int, max_messages: int) -> bool:
        window = await history.window(last, max_chars=max_chars, max_messages=max_messages)
        before = await summaries.overflow(
            last, edge_id=last.user_message_id, max_chars=100_000, max_messages=1_000
        )
        shown = {m.id for m in window}
        left_out = before is not None and any(m.id not in shown for m in before.messages)
        assert not (window.complete and left_out), (max_chars, max_messages)
        return window.complete

    budgets = [(c, n) for c in (10, 30, 60, 100_000) for n in (2, 5, 11, 50)]
    assert [await check(c, n) for c, n in budgets].count(True) == 1  # (100_000, 50)
    assert await check(100_000, 50)
    first = await summaries.overflow(
        last, edge_id=tasks[2].user_message_id, max_chars=1_000, max_messages=50
    )
    assert first is not None
    await summaries.store_summary(
        last.session_id, Summary(first.covers_from, first.covers_to, "S1"), EPOCH
    )
    assert await check(100_000, 50) and await check(100_000, 8)
    assert not await check(100_000, 3) and not await check(30, 50)
