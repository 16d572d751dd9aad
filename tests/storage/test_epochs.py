"""A session's prompt epochs on Postgres (issue 35, item 1): numbered, each with why it
began; a new offer begins one, new words alone do not; a compaction's summary and its
epoch are one transaction, and a compaction under the session's own prompt begins none; sessions pinned before epochs were numbered get a `legacy`
one; a subtask records the epoch its run was asked under."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from agent import PromptEpoch, Summary, prompt_epoch
from agent.models.contract import ToolSpec
from storage import (
    Database,
    PostgresDelegations,
    PostgresMemory,
    PostgresSummaries,
    StorageError,
    inspect_task,
    reset_session,
)
from storage.migrations import available_migrations, migrate
from tests.pg import create_database
from tests.storage.test_delegations import delegation, running_task
from tests.storage.test_history import new_task

REPLY = ToolSpec("final_reply", "Answer.", {"type": "object"})
CLOCK = ToolSpec("current_time", "The time.", {"type": "object"})
SEARCH = ToolSpec("search", "Search.", {"type": "object", "properties": {"q": {}}})
SUBAGENTS = {"agent": "You are a focused helper."}


def epoch(text: str, *tools: ToolSpec) -> PromptEpoch:
    return prompt_epoch(text, offer=tools, subagents=SUBAGENTS)


async def epochs_of(db: Database, session_id: str) -> list[tuple[int, str, str]]:
    rows = await db.pool.fetch(
        "SELECT number, reason, epoch FROM session_epochs WHERE session_id = $1 ORDER BY number",
        session_id,
    )
    return [(r["number"], r["reason"], r["epoch"]) for r in rows]


async def test_epochs_are_numbered_and_say_why_they_began(db: Database) -> None:
    """start; new words with the same offer keep the epoch; a new offer begins #2
    (offer_changed) with the new words, not the old; a reset's next pin is #3 (reset)."""
    memory = PostgresMemory(db)
    task = await new_task(db, "100.0", "100.0", "q")
    first = epoch("Old words.", REPLY, CLOCK)
    assert await memory.pin_prompt(task.session_id, first) == first
    reworded = epoch("New words.", REPLY, CLOCK)
    assert await memory.pin_prompt(task.session_id, reworded) == first
    wider = epoch("New words.", REPLY, CLOCK, SEARCH)
    assert await memory.pin_prompt(task.session_id, wider) == wider
    assert await memory.pin_prompt(task.session_id, wider) == wider  # kept from now on
    await reset_session(db, task.session_id, actor="ops", reason=None)
    assert await memory.pin_prompt(task.session_id, reworded) == reworded
    assert await epochs_of(db, task.session_id) == [
        (1, "start", first.hash),
        (2, "offer_changed", wider.hash),
        (3, "reset", reworded.hash),
    ]
    stored = await db.pool.fetchrow(
        "SELECT offer, tools, subagents FROM prompt_epochs WHERE hash = $1", wider.hash
    )
    assert stored["tools"] == ["final_reply", "current_time", "search"]
    assert stored["offer"] == wider.offer and '"search"' in stored["offer"]


async def test_an_epoch_read_back_is_the_epoch_pinned(db: Database) -> None:
    """What comes back from storage is the epoch itself: text, offer hash, tools and the
    sub-agents' prompts (only the offer's JSON stays behind)."""
    memory = PostgresMemory(db)
    task = await new_task(db, "101.0", "101.0", "q")
    pinned = epoch("Words.", REPLY, CLOCK)
    await memory.pin_prompt(task.session_id, pinned)
    again = await memory.pin_prompt(task.session_id, epoch("Other words.", REPLY, CLOCK))
    assert again == pinned and again.subagent_prompt("agent") == SUBAGENTS["agent"]
    assert again.tools == ("final_reply", "current_time") and again.offer is None


async def test_a_new_session_pins_a_stored_epoch_without_its_text(fresh_db: Database) -> None:
    """Once this process stored an epoch, the next session's pin sends its hash only; and
    should the stored row be gone, the pin sends the text again and stores it."""
    memory = PostgresMemory(fresh_db)
    pinned = epoch("Words.", REPLY, CLOCK)
    first = await new_task(fresh_db, "103.0", "103.0", "q")
    assert await memory.pin_prompt(first.session_id, pinned) == pinned
    second = await new_task(fresh_db, "104.0", "104.0", "q")
    assert await memory.pin_prompt(second.session_id, pinned) == pinned
    assert [r for _, r, _ in await epochs_of(fresh_db, second.session_id)] == ["start"]
    await fresh_db.pool.execute("DELETE FROM session_epochs")
    await fresh_db.pool.execute("UPDATE sessions SET prompt_epoch = NULL")
    await fresh_db.pool.execute("DELETE FROM prompt_epochs")
    third = await new_task(fresh_db, "105.0", "105.0", "q")
    assert await memory.pin_prompt(third.session_id, pinned) == pinned
    stored = await fresh_db.pool.fetchrow("SELECT text, offer, tools, subagents FROM prompt_epochs")
    assert stored is not None and (stored["text"], stored["offer"]) == ("Words.", pinned.offer)
    assert stored["tools"] == ["final_reply", "current_time"]
    assert json.loads(stored["subagents"]) == SUBAGENTS


async def test_a_pin_to_the_callers_own_epoch_carries_no_tools_or_subagents(db: Database) -> None:
    """The common pin (the session kept the caller's epoch) answers with the caller's own
    epoch, the tools' names and sub-agents' prompts left on the server both ways; a pin
    to another epoch reads them back."""
    memory = PostgresMemory(db)
    task = await new_task(db, "106.0", "106.0", "q")
    pinned = epoch("Words.", REPLY, CLOCK)
    await memory.pin_prompt(task.session_id, pinned)
    own = await memory._pin(task.session_id, pinned, with_text=False)
    assert (own["outcome"], own["text"], own["tools"], own["subagents"]) == (
        "kept",
        None,
        None,
        None,
    )
    other = await memory._pin(task.session_id, epoch("Other words.", REPLY, CLOCK), with_text=False)
    assert other["text"] == "Words." and other["tools"] == ["final_reply", "current_time"]


async def test_a_task_without_a_session_is_asked_under_the_current_epoch(db: Database) -> None:
    """No session row (a console task): the current epoch, nothing stored for it."""
    memory = PostgresMemory(db)
    current = epoch("Words.", REPLY)
    assert await memory.pin_prompt("T0:C0:no-such-session", current) == current
    assert await epochs_of(db, "T0:C0:no-such-session") == []


async def test_replicas_beginning_an_epoch_at_once_agree_on_one(fresh_db: Database) -> None:
    """Two first tasks of one session with one new offer: one epoch begins, both are told
    it; two with different offers (a rolling deploy) both begin theirs, in turn."""
    memory = PostgresMemory(fresh_db)
    task = await new_task(fresh_db, "102.0", "102.0", "q")
    same = epoch("Words.", REPLY)
    assert (
        await asyncio.gather(*(memory.pin_prompt(task.session_id, same) for _ in range(4)))
        == [same] * 4
    )
    assert [n for n, _, _ in await epochs_of(fresh_db, task.session_id)] == [1]
    old, new = epoch("Words.", REPLY, CLOCK), epoch("Words.", REPLY, SEARCH)
    await asyncio.gather(
        memory.pin_prompt(task.session_id, old), memory.pin_prompt(task.session_id, new)
    )
    moves = await epochs_of(fresh_db, task.session_id)
    assert [(n, r) for n, r, _ in moves] == [
        (1, "start"),
        (2, "offer_changed"),
        (3, "offer_changed"),
    ]
    assert {h for _, _, h in moves[1:]} == {old.hash, new.hash}


async def test_a_summary_and_its_epoch_are_one_transaction(db: Database) -> None:
    """Storing a summary begins the compaction epoch with it; storing it again (a re-run)
    begins none; a summary whose epoch cannot be stored is not stored either."""
    summaries, memory = PostgresSummaries(db), PostgresMemory(db)
    task = await new_task(db, "103.0", "103.0", "q")
    await memory.pin_prompt(task.session_id, epoch("Before.", REPLY))
    after = epoch("After.", REPLY)
    await summaries.store_summary(task.session_id, Summary(1, 2, "S1"), after)
    await summaries.store_summary(task.session_id, Summary(1, 2, "S1 again"), after)
    assert [(n, r) for n, r, _ in await epochs_of(db, task.session_id)] == [
        (1, "start"),
        (2, "compaction"),
    ]
    assert await memory.pin_prompt(task.session_id, epoch("Later words.", REPLY)) == after
    unstorable = epoch("A NUL \x00 Postgres refuses.", REPLY)
    with pytest.raises(StorageError):
        await summaries.store_summary(task.session_id, Summary(1, 3, "S2"), unstorable)
    count = "SELECT count(*) FROM summaries WHERE session_id = $1"
    assert await db.pool.fetchval(count, task.session_id) == 1
    assert len(await epochs_of(db, task.session_id)) == 2


async def test_a_compaction_under_the_sessions_prompt_restates_its_epoch(db: Database) -> None:
    """Before: every summary stored began an epoch, `compaction`, prompt changed or not.
    Now two summaries under the epoch the session is pinned to number none; one under
    another prompt begins #2, and one more under that prompt restates #2."""
    summaries, memory = PostgresSummaries(db), PostgresMemory(db)
    task = await new_task(db, "105.0", "105.0", "q")
    pinned = epoch("Words.", REPLY)
    await memory.pin_prompt(task.session_id, pinned)
    await summaries.store_summary(task.session_id, Summary(1, 2, "S1"), pinned)
    await summaries.store_summary(task.session_id, Summary(1, 3, "S2"), pinned)
    assert [(n, r) for n, r, _ in await epochs_of(db, task.session_id)] == [(1, "start")]
    deployed = epoch("New words.", REPLY)
    await summaries.store_summary(task.session_id, Summary(1, 4, "S3"), deployed)
    await summaries.store_summary(task.session_id, Summary(1, 5, "S4"), deployed)
    assert await epochs_of(db, task.session_id) == [
        (1, "start", pinned.hash),
        (2, "compaction", deployed.hash),
    ]
    count = "SELECT count(*) FROM summaries WHERE session_id = $1"
    assert await db.pool.fetchval(count, task.session_id) == 4


async def test_tasks_show_reads_the_sessions_epochs(db: Database) -> None:
    """`inspect_task` lists the session's epochs oldest first, with what each offered."""
    memory = PostgresMemory(db)
    task = await new_task(db, "104.0", "104.0", "q")
    await memory.pin_prompt(task.session_id, epoch("Words.", REPLY))
    await memory.pin_prompt(task.session_id, epoch("Words.", REPLY, CLOCK))
    detail = await inspect_task(db, task.id)
    assert [(e.number, e.reason, e.tools) for e in detail.epochs] == [
        (1, "start", ("final_reply",)),
        (2, "offer_changed", ("final_reply", "current_time")),
    ]


async def test_a_subtask_records_the_epoch_of_its_latest_run(fresh_db: Database) -> None:
    """The stamp of the attempt that holds the subtask wins; a stale attempt's is ignored."""
    task = await running_task(fresh_db)
    delegations, memory = PostgresDelegations(fresh_db), PostgresMemory(fresh_db)
    await delegations.record(task, 0, delegation(count=1), timeout_seconds=60)
    claimed = await delegations.claim_subtask()
    assert claimed is not None
    subtask, _ = claimed
    await memory.stamp_subtask(task.id, 0, 0, subtask.attempts, "ours")
    await memory.stamp_subtask(task.id, 0, 0, subtask.attempts - 1, "stale")
    detail = await inspect_task(fresh_db, task.id)
    assert detail.rounds[0].subtasks[0].prompt_epoch == "ours"


# The version of the migration that numbers the epochs, whatever comes after it.
EPOCHS = next(m.version for m in available_migrations() if m.name.endswith("_epochs.sql"))


async def migrated_up_to(dsn: str, version: int) -> None:
    """Apply the migrations up to `version` (as `migrate` would have, back then)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for m in available_migrations():
            if m.version <= version:
                await conn.execute(m.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations VALUES ($1, $2)", m.version, m.name
                )
    finally:
        await conn.close()


async def test_a_session_pinned_before_epochs_were_numbered_gets_a_legacy_one(
    postgres_dsn: str,
) -> None:
    """The epochs migration gives every pinned session its epoch as #1 `legacy`, dated by its first
    answer under it; its next round, whose offer that epoch never recorded, begins #2."""
    dsn = await create_database(postgres_dsn, "legacy_epochs", empty=True)
    await migrated_up_to(dsn, EPOCHS - 1)
    legacy = prompt_epoch("The prompt of before.")
    async with Database(dsn, min_size=1, max_size=2) as db:
        await db.pool.execute(
            "INSERT INTO prompt_epochs (hash, version, text) VALUES ($1, '2', $2);",
            legacy.hash,
            legacy.text,
        )
        await db.pool.execute(
            "INSERT INTO sessions (id, prompt_epoch) VALUES ('s-old', $1), ('s-new', NULL)",
            legacy.hash,
        )
        await db.pool.execute(
            "INSERT INTO messages (id, session_id, anchor, role, kind, text, prompt_epoch,"
            " created_at) VALUES ('a', 's-old', 1, 'assistant', 'reply', 'hi', $1,"
            " '2026-01-02T03:04:05Z')",
            legacy.hash,
        )
        async with db.pool.acquire() as conn:
            assert (await migrate(conn))[0] == EPOCHS
        rows = await db.pool.fetch("SELECT session_id, number, reason, at FROM session_epochs")
        assert [(r["session_id"], r["number"], r["reason"]) for r in rows] == [
            ("s-old", 1, "legacy")
        ]
        assert rows[0]["at"].isoformat() == "2026-01-02T03:04:05+00:00"
        now = epoch("The prompt of now.", REPLY)
        assert await PostgresMemory(db).pin_prompt("s-old", now) == now
        assert [(n, r) for n, r, _ in await epochs_of(db, "s-old")] == [
            (1, "legacy"),
            (2, "offer_changed"),
        ]
