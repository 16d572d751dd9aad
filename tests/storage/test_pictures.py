"""Stored pictures: within their budgets (per thread, per workspace per day), said when not
kept, and gone with a deleted message (issue 37, item 6)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from datetime import UTC, datetime

import asyncpg
from hypothesis import given
from hypothesis import strategies as st

from agent import Image, Task, render_notes
from storage import (
    TOMBSTONE,
    Admission,
    Database,
    EarlierMessage,
    Limits,
    PictureBudgets,
    PostgresHistory,
    admit,
    delete_turn,
    revise_turn,
)
from storage.migrations import available_migrations
from storage.notes import notes_from_json
from storage.pictures import not_kept_note
from tests.pg import create_database


def picture(n: int, size: int = 100, name: str | None = None) -> Image:
    return Image("image/png", bytes([n]) * size, name or f"p{n}.png")


def task_in(team: str, thread: str, ts: str) -> Task:
    return Task(f"{team}:C7:{ts}", f"{team}:C7:{thread}", {"team": team, "channel": "C7"})


async def admit_in(
    db: Database, task: Task, images: tuple[Image, ...], budgets: PictureBudgets, **more: object
) -> None:
    admission = Admission(
        None, task.id, task.session_id, task.address, f"<turn>{task.id}</turn>", images=images
    )
    assert await admit(db, dataclasses.replace(admission, **more), Limits(pictures=budgets))


async def stored_names(db: Database, message_id: str) -> list[str]:
    rows = await db.pool.fetch(
        "SELECT name FROM message_attachments WHERE message_id = $1 ORDER BY ordinal",
        message_id,
    )
    return [r["name"] for r in rows]


async def text_of(db: Database, message_id: str) -> str:
    return str(await db.pool.fetchval("SELECT text FROM messages WHERE id = $1", message_id))


async def notes_of(db: Database, message_id: str) -> str:
    """The host's notes on a message, as the model reads them after its text."""
    stored = await db.pool.fetchval("SELECT notes FROM messages WHERE id = $1", message_id)
    return render_notes(notes_from_json(stored))


async def test_a_picture_past_the_thread_budget_is_not_kept_and_the_turn_says_why(
    db: Database,
) -> None:
    """Within 250 bytes a thread keeps two 100-byte pictures; the third is not stored, and
    a note beside the turn (never in its text) names it with the reason; the window
    carries the two, and the note."""
    budgets = PictureBudgets(thread_bytes=250, workspace_daily_bytes=0)
    first, second = task_in("TA", "1.0", "1.0"), task_in("TA", "1.0", "1.1")
    await admit_in(db, first, (picture(1), picture(2)), budgets)
    await admit_in(db, second, (picture(3),), budgets)
    assert await stored_names(db, second.user_message_id) == []
    assert await text_of(db, second.user_message_id) == f"<turn>{second.id}</turn>"
    note = await notes_of(db, second.user_message_id)
    assert note.startswith('\n<runtime source="attachment_not_kept">Not kept')
    assert '"p3.png" (100 bytes): this thread has stored its limit of 250 bytes' in note
    window = await PostgresHistory(db).window(second, max_chars=10_000, max_messages=10)
    assert [len(m.images) for m in window] == [2, 0]
    assert [n.source for n in window[1].notes] == ["attachment_not_kept"]


async def test_a_smaller_picture_that_still_fits_is_kept(db: Database) -> None:
    """Each picture is weighed alone: one that does not fit is left out, a smaller one
    after it is kept."""
    budgets = PictureBudgets(thread_bytes=150, workspace_daily_bytes=0)
    task = task_in("TB", "1.0", "1.0")
    await admit_in(db, task, (picture(1, 200), picture(2, 100), picture(3, 100)), budgets)
    assert await stored_names(db, task.user_message_id) == ["p2.png"]
    note = await notes_of(db, task.user_message_id)
    assert "2 pictures of this message" in note and '"p1.png"' in note and '"p3.png"' in note


async def test_the_workspace_budget_holds_across_threads_and_not_across_workspaces(
    db: Database,
) -> None:
    """A workspace's day is shared by its threads; another workspace has its own."""
    budgets = PictureBudgets(thread_bytes=0, workspace_daily_bytes=150)
    await admit_in(db, task_in("TC", "1.0", "1.0"), (picture(1),), budgets)
    later = task_in("TC", "2.0", "2.0")
    await admit_in(db, later, (picture(2),), budgets)
    assert await stored_names(db, later.user_message_id) == []
    assert "this workspace has stored today's limit of 150 bytes" in await notes_of(
        db, later.user_message_id
    )
    elsewhere = task_in("TD", "2.0", "2.0")
    await admit_in(db, elsewhere, (picture(3),), budgets)
    assert await stored_names(db, elsewhere.user_message_id) == ["p3.png"]
    days = await db.pool.fetch("SELECT bytes FROM picture_days WHERE workspace = 'TC'")
    assert [d["bytes"] for d in days] == [100]


async def test_the_turns_own_pictures_are_weighed_before_back_filled_ones(
    db: Database,
) -> None:
    """With room for one picture, the turn's is kept and the earlier message's is not."""
    budgets = PictureBudgets(thread_bytes=100, workspace_daily_bytes=0)
    task = task_in("TE", "1.0", "1.5")
    earlier = (EarlierMessage("slack:TE:C7:1.0", "<turn>before</turn>", (picture(1),)),)
    await admit_in(db, task, (picture(2),), budgets, earlier=earlier)
    assert await stored_names(db, task.user_message_id) == ["p2.png"]
    assert await stored_names(db, "slack:TE:C7:1.0") == []
    assert '"p1.png"' in await notes_of(db, "slack:TE:C7:1.0")


async def test_concurrent_admissions_in_one_thread_never_both_slip_past(db: Database) -> None:
    """Four messages of one thread admitted at once with room for one picture: one kept."""
    budgets = PictureBudgets(thread_bytes=100, workspace_daily_bytes=0)
    tasks = [task_in("TF", "1.0", f"1.{n}") for n in range(1, 5)]
    await asyncio.gather(*(admit_in(db, t, (picture(n),), budgets) for n, t in enumerate(tasks)))
    kept = [await stored_names(db, t.user_message_id) for t in tasks]
    assert sorted(len(k) for k in kept) == [0, 0, 0, 1]
    assert await db.pool.fetchval("SELECT picture_bytes FROM sessions WHERE id = 'TF:C7:1.0'") == (
        100
    )


async def test_an_edit_keeps_the_note_on_pictures_not_kept(db: Database) -> None:
    """The edit replaces the text alone: the note stays beside it."""
    budgets = PictureBudgets(thread_bytes=10, workspace_daily_bytes=0)
    task = task_in("TG", "1.0", "1.0")
    await admit_in(db, task, (picture(1),), budgets)
    edited = datetime.now(UTC)
    assert await revise_turn(
        db, event_id=None, message_id=task.user_message_id, text="<turn>v2</turn>", edited_at=edited
    )
    assert await text_of(db, task.user_message_id) == "<turn>v2</turn>"
    assert '"p1.png"' in await notes_of(db, task.user_message_id)


async def test_a_deleted_turns_pictures_are_deleted_and_never_shown_again(db: Database) -> None:
    """The deletion deletes the turn's pictures; the next turn's window carries none."""
    first, later = task_in("TH", "1.0", "1.0"), task_in("TH", "1.0", "1.1")
    await admit_in(db, first, (picture(1), picture(2)), PictureBudgets())
    deleted = await delete_turn(
        db, event_id="Ev-TH", message_ids=[first.user_message_id], task_id=first.id
    )
    assert deleted is not None and deleted.turns == 1
    assert await stored_names(db, first.user_message_id) == []
    await admit_in(db, later, (), PictureBudgets())
    window = await PostgresHistory(db).window(later, max_chars=10_000, max_messages=10)
    assert (window[0].text, window[0].notes, window[0].images) == ("", (TOMBSTONE,), ())
    assert all(m.images == () for m in window)


@given(st.text())
def test_no_name_can_close_the_note(name: str) -> None:
    """Whatever a picture's name, the note has one tag pair, and nothing else angled."""
    note = not_kept_note([(Image("image/png", b"x", name), "a reason")])
    assert note is not None
    assert re.fullmatch(r'<runtime source="attachment_not_kept">[^<>]*</runtime>', note.rendered())
    assert note.rendered().isascii()


async def test_the_migration_deletes_the_pictures_of_turns_deleted_before_it(
    postgres_dsn: str,
) -> None:
    """Turns deleted before migration 014 lose their pictures to it; the others keep theirs."""
    conn = await asyncpg.connect(
        await create_database(postgres_dsn, "pictures_migration", empty=True)
    )
    try:
        for migration in available_migrations():
            if migration.name.endswith("_pictures.sql"):
                await conn.execute(
                    "INSERT INTO sessions (id) VALUES ('s');"
                    "INSERT INTO messages (id, session_id, anchor, role, kind, text, deleted_at)"
                    " VALUES ('gone', 's', 1, 'user', 'turn', 'x', now()),"
                    " ('kept', 's', 2, 'user', 'turn', 'y', NULL);"
                    "INSERT INTO message_attachments (message_id, ordinal, name, media_type, data)"
                    " VALUES ('gone', 1, 'a.png', 'image/png', 'a'),"
                    " ('kept', 1, 'b.png', 'image/png', 'b')"
                )
            await conn.execute(migration.sql)
        left = await conn.fetch("SELECT message_id FROM message_attachments")
        assert [r["message_id"] for r in left] == ["kept"]
    finally:
        await conn.close()
