"""Pictures (and PDFs) stored with their turn at admission, read back by the history window,
and marked when a provider refused one (issue 35, item 2)."""

from __future__ import annotations

import asyncio
import dataclasses

from agent import MAX_IMAGES_PER_REQUEST, Document, Image, Route, RuntimeNote, Task
from storage import (
    Admission,
    Database,
    EarlierMessage,
    PostgresAttachmentRefusals,
    PostgresHistory,
    admit,
)


def picture(n: int) -> Image:
    return Image("image/png", b"\x89PNG\r\n\x1a\n" + bytes([n]) * 8, f"p{n}.png")


def task_in(thread: str, ts: str) -> Task:
    return Task(f"T1:C7:{ts}", f"T1:C7:{thread}", {"channel": "C7", "thread_ts": thread})


async def admit_with(
    db: Database, task: Task, images: tuple[Image | Document, ...], **more: object
) -> None:
    admission = Admission(None, task.id, task.session_id, task.address, f"turn {task.id}")
    assert await admit(db, dataclasses.replace(admission, images=images, **more))


async def test_a_turns_pictures_come_back_with_it_in_order(db: Database) -> None:
    """Stored in the admission statement; the window's turn carries them, in order."""
    task = task_in("1.0", "1.0")
    await admit_with(db, task, (picture(1), picture(2)))
    window = await PostgresHistory(db).window(task, max_chars=10_000, max_messages=10)
    assert window[-1].images == (picture(1), picture(2))


async def test_a_second_admission_stores_no_second_copy(db: Database) -> None:
    """A duplicate event admits nothing, pictures included."""
    task = task_in("2.0", "2.0")
    await admit_with(db, task, (picture(1),))
    again = Admission(None, task.id, task.session_id, task.address, "x", images=(picture(9),))
    assert not await admit(db, again)
    rows = await db.pool.fetch(
        "SELECT data FROM message_attachments WHERE message_id = $1", task.user_message_id
    )
    assert [bytes(r["data"]) for r in rows] == [picture(1).data]


async def test_back_filled_messages_keep_their_pictures(db: Database) -> None:
    """The statement-by-statement admission (with back-fill) stores every message's."""
    task = task_in("3.0", "3.5")
    earlier = (EarlierMessage("slack:T1:C7:3.0", "first", (picture(3),)),)
    await admit_with(db, task, (picture(4),), earlier=earlier)
    window = await PostgresHistory(db).window(task, max_chars=10_000, max_messages=10)
    assert [m.images for m in window] == [(picture(3),), (picture(4),)]


async def test_the_window_carries_only_the_newest_pictures(db: Database) -> None:
    """Three turns of four pictures: the window holds the newest eight, none of the first."""
    tasks = [task_in("4.0", f"4.{n}") for n in range(1, 4)]
    for n, task in enumerate(tasks):
        await admit_with(db, task, tuple(picture(10 * n + k) for k in range(4)))
    window = await PostgresHistory(db).window(tasks[-1], max_chars=10_000, max_messages=10)
    assert [len(m.images) for m in window] == [0, 4, 4]
    assert sum(len(m.images) for m in window) == MAX_IMAGES_PER_REQUEST


def pdf(n: int, pages: int = 2) -> Document:
    return Document(b"%PDF-1.7 " + bytes([n]) * 8, f"d{n}.pdf", pages)


async def test_a_kept_pdf_comes_back_as_a_document_with_its_pages_and_key(db: Database) -> None:
    """A PDF stored beside the turn (after its picture, in file order) is a `Document` of
    the window's turn with its page count; each attachment carries its key."""
    task = task_in("5.0", "5.0")
    await admit_with(db, task, (picture(1), pdf(2, pages=7)))
    [turn] = await PostgresHistory(db).window(task, max_chars=10_000, max_messages=10)
    assert turn.images == (picture(1),) and turn.documents == (pdf(2, pages=7),)
    assert [turn.images[0].key, turn.documents[0].key] == [
        f"{task.user_message_id}#1",
        f"{task.user_message_id}#2",
    ]


async def test_a_pdfs_text_layer_comes_back_with_it(db: Database) -> None:
    """A kept PDF's block of the turn (its text layer as the turn carries it) and its
    pages' text are stored beside it and read back (migration 030): what a request that
    carries the PDF leaves out of the turn, and what a cited quote is checked against."""
    task = task_in("5.5", "5.5")
    block = '[file "d3.pdf" (PDF, 17 bytes)]\nQ3 &amp; Q4\n[end of file "d3.pdf"]'
    pages = ("Q3 & Q4", "", "the last page")
    kept = dataclasses.replace(pdf(3, pages=3), in_turn=block, page_texts=pages)
    await admit_with(db, task, (kept, pdf(4)))
    [turn] = await PostgresHistory(db).window(task, max_chars=10_000, max_messages=10)
    with_text, without = turn.documents
    assert (with_text.in_turn, with_text.page_texts) == (block, pages)
    assert (without.in_turn, without.page_texts) == ("", ())


async def test_a_refused_picture_is_marked_once_and_never_in_a_window_again(db: Database) -> None:
    """Before: a picture a provider refused came back with every window of its thread, and
    each round failed on it. Now it is marked (by which route), the turn says it was not
    shown and why, every later window leaves it out, a second replica marking it at the same
    time adds nothing — and its bytes stay in the history (issue 47: they used to be
    erased)."""
    task = task_in("6.0", "6.0")
    await admit_with(db, task, (picture(1), picture(2)))
    [turn] = await PostgresHistory(db).window(task, max_chars=10_000, max_messages=10)
    refused = turn.images[1].key
    refusals = PostgresAttachmentRefusals(db)
    route = Route("anthropic", "claude-sonnet-4-5", 1)
    await asyncio.gather(
        refusals.refuse([refused], route=route, reason="it could not be read"),
        refusals.refuse([refused], route=route, reason="it could not be read"),
    )
    [after] = await PostgresHistory(db).window(task, max_chars=10_000, max_messages=10)
    assert after.images == (picture(1),)
    assert "runtime" not in after.text  # the note is beside the turn, not in it
    assert after.notes == (
        RuntimeNote(
            "attachment_refused",
            "Not shown to you (the provider refused it: it could not be read): the "
            'picture "p2.png" (16 bytes).',
        ),
    )
    row = await db.pool.fetchrow(
        "SELECT refused_by, octet_length(data) AS size FROM message_attachments "
        "WHERE message_id = $1 AND ordinal = 2",
        task.user_message_id,
    )
    assert (row["refused_by"], row["size"]) == ("anthropic:claude-sonnet-4-5", 16)
