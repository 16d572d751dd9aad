"""Work-tool calls in Postgres: one row per call, upserted as it starts and ends, cleaned
and capped like history, read back in order for the task view."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent import Task, ToolCallRecord
from storage import Database, PostgresToolCalls, tool_calls_of
from storage.tool_calls import STORED_CHARS, stored
from tests.storage.test_history import new_task


async def test_a_call_is_stored_as_it_starts_and_ends(db: Database) -> None:
    """ "running" makes the row, "ok" completes it: state, output and end time."""
    task = await new_task(db, "1.0", "1.0", "hi")
    calls = PostgresToolCalls(db)
    await calls.tool_call(task, ToolCallRecord("c1", "fake__echo", '{"text": "a"}', "running"))
    [running] = await tool_calls_of(db, task.id)
    assert (running.state, running.output, running.ended_at, running.round) == (
        "running",
        "",
        None,
        0,
    )
    await calls.tool_call(
        task, ToolCallRecord("c1", "fake__echo", '{"text": "a"}', "ok", "echo: a")
    )
    await calls.tool_call(task, ToolCallRecord("c2", "current_time", "{}", "error", "boom"))
    done, failed = await tool_calls_of(db, task.id)
    assert (done.call_id, done.state, done.output) == ("c1", "ok", "echo: a")
    assert done.ended_at is not None and done.ended_at >= done.started_at
    assert (failed.name, failed.state, failed.arguments) == ("current_time", "error", "{}")


async def test_the_round_is_the_number_of_delegating_rounds_before(db: Database) -> None:
    task = await new_task(db, "2.0", "2.0", "hi")
    await db.pool.execute(
        "INSERT INTO task_rounds (task_id, number, call_id, raw_arguments, acknowledgment)"
        " VALUES ($1, 0, 'd', '{}', 'on it')",
        task.id,
    )
    await PostgresToolCalls(db).tool_call(task, ToolCallRecord("c", "x", "{}", "running"))
    [call] = await tool_calls_of(db, task.id)
    assert call.round == 1


async def test_output_is_cleaned_and_capped(db: Database) -> None:
    """NUL and lone surrogates cannot be stored; a megabyte is kept as its first part."""
    task = await new_task(db, "3.0", "3.0", "hi")
    big = "y" * (STORED_CHARS * 3)
    record = ToolCallRecord("c", "t", '{"a": "\x00\ud800"}', "ok", big)
    await PostgresToolCalls(db).tool_call(task, record)
    [call] = await tool_calls_of(db, task.id)
    assert call.arguments == '{"a": "\ufffd\ufffd"}'
    assert call.output.startswith("y" * STORED_CHARS) and len(call.output) < STORED_CHARS + 100


async def test_another_tasks_calls_are_not_shown(db: Database) -> None:
    task = await new_task(db, "4.0", "4.0", "hi")
    await PostgresToolCalls(db).tool_call(
        Task("other", "s", {}), ToolCallRecord("c", "t", "{}", "ok")
    )
    assert await tool_calls_of(db, task.id) == []


@given(st.text(max_size=200))
def test_stored_text_is_storable_and_bounded(text: str) -> None:
    kept = stored(text)
    assert "\x00" not in kept and len(kept) <= STORED_CHARS + 100
    kept.encode("utf-8")  # no lone surrogates
