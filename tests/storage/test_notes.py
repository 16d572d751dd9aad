"""The host's notes on stored messages (issue 47, item 5): kept beside a turn, never in its
text, and moved out of the turns that migration 031 found them in."""

from __future__ import annotations

import asyncpg

from agent import DELETED, RuntimeNote
from storage.migrations import available_migrations
from storage.notes import notes_from_json, notes_json
from tests.pg import create_database

NOT_KEPT = 'Not kept, so you cannot see it: a picture of this message, "a.png" (9 bytes): full.'
REFUSED = 'Not shown to you (the provider refused it: too large): the picture "b.png" (5 bytes).'


async def test_the_migration_moves_each_note_out_of_the_turns_text(postgres_dsn: str) -> None:
    """A turn whose text had two notes appended (not kept, refused) keeps its words alone
    and gets both, typed; a deleted turn's tombstone text is gone (its `deleted_at` says
    it); a turn without notes is unchanged."""
    dsn = await create_database(postgres_dsn, "notes_migration", empty=True)
    conn = await asyncpg.connect(dsn)
    suffix = f"\n<runtime>{NOT_KEPT}</runtime>\n<runtime>{REFUSED}</runtime>"
    try:
        for migration in available_migrations():
            if migration.version == 31:
                await conn.execute(
                    "INSERT INTO sessions (id) VALUES ('s');"
                    "INSERT INTO messages (id, session_id, anchor, role, kind, text, pictures_note,"
                    " deleted_at) VALUES"
                    f" ('noted', 's', 1, 'user', 'turn', '<turn>hi</turn>' || $${suffix}$$,"
                    f"  $${suffix}$$, NULL),"
                    " ('gone', 's', 2, 'user', 'turn',"
                    "  '<runtime>A message here was deleted by its author; its text is gone."
                    "</runtime>', NULL, now()),"
                    " ('plain', 's', 3, 'user', 'turn', '<turn>plain</turn>', NULL, NULL)"
                )
            await conn.execute(migration.sql)
        rows = {
            r["id"]: (r["text"], notes_from_json(r["notes"]))
            for r in await conn.fetch("SELECT id, text, notes FROM messages")
        }
    finally:
        await conn.close()
    assert rows == {
        "noted": (
            "<turn>hi</turn>",
            (
                RuntimeNote("attachment_not_kept", NOT_KEPT),
                RuntimeNote("attachment_refused", REFUSED),
            ),
        ),
        "gone": ("", ()),
        "plain": ("<turn>plain</turn>", ()),
    }


def test_stored_notes_read_back_and_an_unknown_source_is_left_out() -> None:
    """Notes go to JSON and back as they were; one of a source this version does not know
    (a newer deployment's) is not shown rather than guessed at."""
    notes = (RuntimeNote("attachment_refused", "x"), DELETED)
    assert notes_from_json(notes_json(notes)) == notes
    assert notes_json(()) is None
    mixed = '[{"source": "from_the_future", "text": "?"}, {"source": "repair", "text": "y"}]'
    assert notes_from_json(mixed) == (RuntimeNote("repair", "y"),)
