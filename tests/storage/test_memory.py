"""Memory on Postgres: a session keeps its first prompt epoch, answers record their origin,
an operator's reset re-pins at the next task."""

from __future__ import annotations

import asyncio

import pytest

from agent import AnswerOrigin, PromptEpoch, Route, Task, prompt_epoch
from storage import (
    Database,
    PostgresHistory,
    PostgresMemory,
    UnknownSession,
    inspect_task,
    reset_session,
)
from tests.storage.test_history import new_task, reply

OLD = prompt_epoch("You are the old prompt.")
NEW = prompt_epoch("You are the new prompt.")


async def test_a_session_keeps_the_prompt_of_its_first_task(db: Database) -> None:
    """A deploy with a new prompt does not change a session pinned to the old one; a new
    session gets the new one."""
    memory = PostgresMemory(db)
    old_thread = await new_task(db, "70.0", "70.0", "q1")
    assert await memory.pin_prompt(old_thread.session_id, OLD) == OLD
    assert await memory.pin_prompt(old_thread.session_id, NEW) == OLD
    new_thread = await new_task(db, "71.0", "71.0", "q1")
    assert await memory.pin_prompt(new_thread.session_id, NEW) == NEW
    stored = await db.pool.fetchval("SELECT text FROM prompt_epochs WHERE hash = $1", OLD.hash)
    assert stored == OLD.text


async def test_an_epoch_is_stored_once_per_hash(fresh_db: Database) -> None:
    """Many sessions on one prompt share one epoch row."""
    memory = PostgresMemory(fresh_db)
    for n in range(3):
        task = await new_task(fresh_db, f"72.{n}", f"72.{n}", "q")
        await memory.pin_prompt(task.session_id, OLD)
    assert await fresh_db.pool.fetchval("SELECT count(*) FROM prompt_epochs") == 1


async def test_replicas_pinning_a_new_session_at_once_agree_on_one_epoch(
    fresh_db: Database,
) -> None:
    """Two first tasks of one session on different deployments (epochs offering the same):
    one epoch wins, both are told it; a session that does not exist gets the current
    prompt (pinned nowhere)."""
    memory = PostgresMemory(fresh_db)
    task = await new_task(fresh_db, "75.0", "75.0", "q")
    first, second = await asyncio.gather(
        memory.pin_prompt(task.session_id, OLD), memory.pin_prompt(task.session_id, NEW)
    )
    pinned = await fresh_db.pool.fetchval(
        "SELECT prompt_epoch FROM sessions WHERE id = $1", task.session_id
    )
    assert first == second and first.hash == pinned and first in (OLD, NEW)
    assert await memory.pin_prompt("no-such-session", NEW) == NEW
    stored = await fresh_db.pool.fetch("SELECT hash FROM prompt_epochs")
    assert [r["hash"] for r in stored] == [pinned]  # the losing replica's is not stored


async def test_reset_re_pins_the_session_at_its_next_task_and_is_audited(db: Database) -> None:
    """After `sessions reset`, the next pin takes the deployment's current prompt."""
    memory = PostgresMemory(db)
    task = await new_task(db, "73.0", "73.0", "q1")
    await memory.pin_prompt(task.session_id, OLD)
    done = await reset_session(db, task.session_id, actor="ops", reason="new rules")
    assert done.from_epoch == OLD.hash
    assert await memory.pin_prompt(task.session_id, NEW) == NEW
    audit = await db.pool.fetchrow(
        "SELECT action, actor, reason, from_epoch FROM session_interventions WHERE session_id = $1",
        task.session_id,
    )
    assert dict(audit) == {
        "action": "reset",
        "actor": "ops",
        "reason": "new rules",
        "from_epoch": OLD.hash,
    }


async def test_reset_of_an_unknown_session_says_so(db: Database) -> None:
    """A mistyped session id is a clear error, not a silent no-op."""
    with pytest.raises(UnknownSession, match="No session has the id 'T1:nope'"):
        await reset_session(db, "T1:nope", actor="ops", reason=None)


async def reply_origin(db: Database, task: Task) -> tuple[str | None, ...]:
    """The task's stored reply's origin as `inspect_task` shows it."""
    detail = await inspect_task(db, task.id)
    answer = next(m for m in detail.messages if m.kind == "reply")
    return (answer.prompt_epoch, answer.route_provider, answer.route_model, answer.route_slot)


async def test_an_answer_records_its_epoch_and_route_once(db: Database) -> None:
    """The first stamp wins (a re-run finds the stored answer and does not re-stamp it), and
    `inspect_task` shows it."""
    memory = PostgresMemory(db)
    task = await new_task(db, "74.0", "74.0", "q1")
    await PostgresHistory(db).append(reply(task, "a1"), answers=task.user_message_id)
    await memory.stamp(task.reply_id, AnswerOrigin(OLD.hash, Route("openai", "gpt-x", 1)))
    await memory.stamp(task.reply_id, AnswerOrigin(NEW.hash, Route("anthropic", "c", 0)))
    assert await reply_origin(db, task) == (OLD.hash, "openai", "gpt-x", "fallback")
    detail = await inspect_task(db, task.id)
    turn = next(m for m in detail.messages if m.kind == "turn")
    assert turn.route_provider is None


async def test_an_answer_stored_with_its_origin_keeps_the_first(db: Database) -> None:
    """`append` stores the origin with the answer it stores; an append that finds the
    answer stored (a re-run) changes neither its text nor its origin."""
    history = PostgresHistory(db)
    task = await new_task(db, "76.0", "76.0", "q1")
    first = AnswerOrigin(OLD.hash, Route("openai", "gpt-x", 0))
    await history.append(reply(task, "a1"), answers=task.user_message_id, origin=first)
    again = AnswerOrigin(NEW.hash, Route("anthropic", "c", 1))
    stored = await history.append(reply(task, "a2"), answers=task.user_message_id, origin=again)
    assert stored.text == "a1"
    assert await reply_origin(db, task) == (OLD.hash, "openai", "gpt-x", "primary")


def test_an_epoch_is_the_hash_of_the_text() -> None:
    """Two texts, two epochs; one text, one epoch."""
    assert prompt_epoch("a") == prompt_epoch("a")
    assert prompt_epoch("a").hash != prompt_epoch("b").hash
    assert isinstance(prompt_epoch("a"), PromptEpoch)
