"""A task's reply is stored only under its lease (storage/history.py `append(lease=…)`):
an attempt that lost its lease while a later one covered new messages of its thread
(storage/thread_queue.py) stores nothing, so the reply that answers them was written
with them."""

from __future__ import annotations

import asyncio
import dataclasses

import asyncpg
import pytest

from agent import StoredMessage, Task
from agent.core.delegation import RoundInput, Subtask
from agent.core.ports import PromptEpoch
from agent.durable.runner import DEFAULT_RUNNER, RunnerPorts, TaskRunner
from agent.durable.runner_setup import Unobserved
from agent.rounds.control import Decision, Reply
from storage import (
    Admission,
    Database,
    PostgresDelegations,
    PostgresHistory,
    PostgresTaskQueue,
    QueueModes,
    Superseded,
    admit,
)
from storage.database import LEASE_LOCK_SPACE
from tests.agent.memory import MemoryAlerts, MemoryPublisher

COLLECT = QueueModes("collect")
PROMPT = PromptEpoch("hash-of-the-prompt", "v-test", "You are the test agent.")


async def enqueue(db: Database, ts: str) -> str:
    task_id = f"T1:C1:{ts}"
    address = {"team": "T1", "channel": "C1", "thread_ts": "1.0", "user": "U1"}
    assert await admit(db, Admission(None, task_id, "T1:C1:1.0", address, f"m{ts}"))
    return task_id


def reply_of(task: Task, text: str) -> StoredMessage:
    return StoredMessage(task.reply_id, task.session_id, "assistant", "reply", text)


async def claimed(queue: PostgresTaskQueue) -> Task:
    task = await queue.claim()
    assert task is not None
    return task


async def lose_lease_owner(db: Database) -> None:
    """Drop the process's signal connection: the leases it took are dead from now on (the
    next `lease_owner()` is a new one)."""
    owner = await db.lease_owner()
    in_doubt = asyncio.create_task(db.leases_in_doubt())
    conn = await asyncpg.connect(db._dsn)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks"
            " WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND objsubid = 2",
            LEASE_LOCK_SPACE,
            owner,
        )
    finally:
        await conn.close()
    await asyncio.wait_for(in_doubt, 10)


async def test_a_superseded_attempt_stores_no_reply(fresh_db: Database) -> None:
    """After a take-over whose claim covered a new message, the first attempt's reply is
    refused and nothing is stored; the current attempt's is stored after the covered turn."""
    history = PostgresHistory(fresh_db)
    first_id = await enqueue(fresh_db, "1.0")
    first = await claimed(PostgresTaskQueue(fresh_db, modes=lambda: COLLECT))
    second_id = await enqueue(fresh_db, "1.1")
    await lose_lease_owner(fresh_db)
    current = await claimed(PostgresTaskQueue(fresh_db, modes=lambda: COLLECT))
    assert (current.id, current.attempts, current.covers) == (first_id, 2, (second_id,))
    with pytest.raises(Superseded):
        await history.append(
            reply_of(first, "m1.0 only"), answers=first.newest_turn_id, lease=first
        )
    assert await history.get(first.reply_id) is None
    both = reply_of(current, "m1.0 and m1.1")
    stored = await history.append(both, answers=current.newest_turn_id, lease=current)
    assert stored.text == "m1.0 and m1.1"
    with pytest.raises(Superseded):  # a stored reply is not the stale attempt's either
        await history.append(
            reply_of(first, "m1.0 only"), answers=first.newest_turn_id, lease=first
        )
    anchored = await fresh_db.pool.fetchval(
        "SELECT r.anchor = q.seq FROM messages r, messages q WHERE r.id = $1 AND q.id = $2",
        current.reply_id,
        current.newest_turn_id,
    )
    assert anchored


async def test_a_fenced_append_reads_back_what_its_lease_stored(fresh_db: Database) -> None:
    """The current attempt appending again gets the stored reply back, as an unfenced
    append does; a question that is not stored is still a LookupError."""
    history = PostgresHistory(fresh_db)
    await enqueue(fresh_db, "1.0")
    task = await claimed(PostgresTaskQueue(fresh_db))
    await history.append(reply_of(task, "first"), answers=task.newest_turn_id, lease=task)
    again = await history.append(reply_of(task, "second"), answers=task.newest_turn_id, lease=task)
    assert again.text == "first"
    stray = dataclasses.replace(reply_of(task, "x"), id="task:T1:C1:1.0:other")
    with pytest.raises(LookupError):
        await history.append(stray, answers="task:nobody:user", lease=task)


class Settlements(Unobserved):
    """A runner observer that keeps the outcomes it hears."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def task_settled(self, outcome: str) -> None:
        self.outcomes.append(outcome)


class TurnsAgent:
    """Answers with the texts of the user turns its round sees; the first round waits
    for `release` after saying it started (`asked`), as a stalled worker would."""

    def __init__(self) -> None:
        self.asked, self.release = asyncio.Event(), asyncio.Event()
        self.rounds = 0

    async def __call__(self, round_input: RoundInput) -> Decision:
        self.rounds += 1
        if self.rounds == 1:
            self.asked.set()
            await self.release.wait()
        return Reply(" + ".join(m.text for m in round_input.window if m.role == "user"))

    async def pin_prompt(self, task: Task) -> PromptEpoch:
        return PROMPT

    async def run_subtask(self, subtask: Subtask, task: Task) -> str:
        raise AssertionError("no subtasks here")


def runner_on(
    db: Database, queue: PostgresTaskQueue, agent: TurnsAgent, observer: Settlements
) -> tuple[TaskRunner, MemoryPublisher]:
    publisher = MemoryPublisher()
    ports = RunnerPorts(
        queue=queue,
        delegations=PostgresDelegations(db),
        history=PostgresHistory(db),
        publisher=publisher,
        alerts=MemoryAlerts(),
        observer=observer,
    )
    # No heartbeat within the test: the worker stalls past its lease without noticing.
    settings = dataclasses.replace(DEFAULT_RUNNER, heartbeat_seconds=600)
    return TaskRunner(ports, agent, settings=settings), publisher


async def taken_over_by(queue: PostgresTaskQueue) -> Task:
    """Claim until the stalled task's lease has run out and this queue takes it over."""
    async with asyncio.timeout(30):
        while (task := await queue.claim()) is None:  # noqa: ASYNC110 - a lease runs out unannounced
            await asyncio.sleep(0.1)
    return task


async def test_a_stalled_runner_stores_nothing_and_the_take_over_answers_every_message(
    fresh_db: Database,
) -> None:
    """A worker stalled past its lease while another took its task over, covering a new
    message, stores and posts nothing and counts `lease_lost`; the take-over's reply,
    written with both messages, is the one stored and posted."""
    first_id = await enqueue(fresh_db, "1.0")
    stalled_queue = PostgresTaskQueue(fresh_db, lease_seconds=0.5, modes=lambda: COLLECT)
    stalled, stalled_outcomes = TurnsAgent(), Settlements()
    runner, stalled_posts = runner_on(fresh_db, stalled_queue, stalled, stalled_outcomes)
    first = await claimed(stalled_queue)
    run = asyncio.create_task(runner.run_task(first))
    await asyncio.wait_for(stalled.asked.wait(), 10)
    second_id = await enqueue(fresh_db, "1.1")
    async with Database(fresh_db._dsn, min_size=1, max_size=2) as other_process:
        queue = PostgresTaskQueue(other_process, modes=lambda: COLLECT)
        current = await taken_over_by(queue)
        assert (current.id, current.covers) == (first_id, (second_id,))
        stalled.release.set()
        await asyncio.wait_for(run, 10)
        assert stalled_outcomes.outcomes == ["lease_lost"] and stalled_posts.posts == []
        assert await PostgresHistory(fresh_db).get(first.reply_id) is None
        agent, outcomes = TurnsAgent(), Settlements()
        agent.release.set()
        taker, posts = runner_on(other_process, queue, agent, outcomes)
        await taker.run_task(current)
    assert posts.posts == [(first.reply_id, "m1.0 + m1.1")]
    assert outcomes.outcomes == ["answered"]
    states = await fresh_db.pool.fetch("SELECT id, state, covered_by FROM tasks ORDER BY seq")
    assert [tuple(r) for r in states] == [
        (first_id, "done", None),
        (second_id, "covered", first_id),
    ]
