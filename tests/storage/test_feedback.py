"""Feedback storage: one vote per person and reply, with the reply's origin, and the report."""

from __future__ import annotations

from agent import AnswerOrigin, Route, StoredMessage
from storage import (
    Admission,
    Database,
    PostgresHistory,
    PostgresTaskQueue,
    admit,
    feedback_report,
    record_vote,
    votes_of,
)


async def reply(db: Database, ts: str, model: str = "gpt-a", epoch: str = "epoch-a") -> str:
    """A stored reply of a task, stamped with its prompt epoch and route."""
    address = {"channel": "C1", "thread_ts": ts, "team": "T1", "user": "U1"}
    await admit(db, Admission(None, f"T1:C1:{ts}", f"T1:C1:{ts}", address, "question"))
    task = await PostgresTaskQueue(db).claim()
    assert task is not None
    message = StoredMessage(task.reply_id, task.session_id, "assistant", "reply", "answer")
    origin = AnswerOrigin(epoch, Route("openai", model, 0))
    await PostgresHistory(db).append(message, answers=task.user_message_id, origin=origin)
    return task.reply_id


async def test_a_second_click_changes_the_vote_instead_of_adding_one(fresh_db: Database) -> None:
    """One row per person and reply; the same vote again writes nothing."""
    reply_id = await reply(fresh_db, "1.0")
    assert await record_vote(fresh_db, reply_id, "U1", "positive") == "new"
    assert await record_vote(fresh_db, reply_id, "U1", "positive") == "same"
    assert await record_vote(fresh_db, reply_id, "U1", "negative") == "changed"
    assert await record_vote(fresh_db, reply_id, "U2", "positive") == "new"
    votes = await votes_of(fresh_db, reply_id)
    assert [(v.user_id, v.value) for v in votes] == [("U1", "negative"), ("U2", "positive")]
    assert {(v.prompt_epoch, v.route_model) for v in votes} == {("epoch-a", "gpt-a")}


async def test_a_vote_for_no_reply_is_not_stored(fresh_db: Database) -> None:
    """A click on something that is not a stored reply (an acknowledgment, a deleted
    reply) stores nothing."""
    assert await record_vote(fresh_db, "task:nope:reply", "U1", "positive") == "unknown"
    assert await fresh_db.pool.fetchval("SELECT count(*) FROM reply_feedback") == 0


async def test_the_report_gives_the_ratio_per_prompt_epoch_and_model(fresh_db: Database) -> None:
    """Each epoch and model its own line, with its counts and positive share."""
    a1, a2 = await reply(fresh_db, "1.0"), await reply(fresh_db, "2.0")
    b = await reply(fresh_db, "3.0", model="gpt-b", epoch="epoch-b")
    await record_vote(fresh_db, a1, "U1", "positive")
    await record_vote(fresh_db, a1, "U2", "positive")
    await record_vote(fresh_db, a2, "U1", "negative")
    await record_vote(fresh_db, b, "U1", "negative")
    lines = {(line.prompt_epoch, line.model): line for line in await feedback_report(fresh_db)}
    assert set(lines) == {("epoch-a", "gpt-a"), ("epoch-b", "gpt-b")}
    a = lines[("epoch-a", "gpt-a")]
    assert (a.positive, a.negative, round(a.ratio, 3)) == (2, 1, 0.667)
    assert (lines[("epoch-b", "gpt-b")].ratio, lines[("epoch-b", "gpt-b")].provider) == (
        0.0,
        "openai",
    )
