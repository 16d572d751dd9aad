"""The messages the app receives, kept (storage/seen_messages.py): what each event tells
of its streams, what a read marks, edits and deletions, and retention."""

from __future__ import annotations

from storage import (
    Database,
    ReadMessage,
    Retention,
    SeenMessage,
    channel_messages,
    forget_seen,
    mark_read,
    observe_message,
    revise_seen,
    stored_messages,
)

ROOT = "1700000000.000100"


def seen(ts: str, root: str = "", *, extends: bool = True, team: str = "T1") -> SeenMessage:
    session = f"{team}:C1:{root or ts}"
    return SeenMessage(team, "C1", ts, root, f"<turn>{ts}</turn>", extends, session)


async def test_a_thread_whose_root_and_replies_arrived_is_complete_through_the_last(
    fresh_db: Database,
) -> None:
    """A message at the top of a channel begins its thread and the channel's stream; each
    `message` event extends them; an `app_mention` alone does not."""
    await observe_message(fresh_db, seen(ROOT))
    await observe_message(fresh_db, seen("1700000000.000200", ROOT))
    after_mention = await observe_message(fresh_db, seen("1700000000.000300", ROOT, extends=False))
    assert after_mention.complete_through == "1700000000.000200"
    assert not after_mention.known and after_mention.gap is None
    top, start = await channel_messages(fresh_db, "T1", "C1", before="1700000000.000300", limit=9)
    assert ([ts for ts, _ in top], start) == ([ROOT], ROOT)
    kept = await stored_messages(fresh_db, "T1", "C1", ROOT, before="1700000000.000300", limit=10)
    assert [ts for ts, _ in kept] == [ROOT, "1700000000.000200"]


async def test_a_reply_in_a_thread_whose_start_was_not_seen_proves_nothing(
    fresh_db: Database,
) -> None:
    """Replies to a root the store never saw leave the thread not known complete."""
    stream = await observe_message(fresh_db, seen("1700000000.000200", ROOT))
    assert stream.complete_through is None


async def test_a_read_marks_what_it_read_and_what_it_missed(fresh_db: Database) -> None:
    """A read keeps its messages (the root at the top of the channel) and marks the
    thread complete through its newest, with its gap; a later read never moves the mark
    back, and a whole read clears the gap."""
    read = [ReadMessage(ROOT, "", "root"), ReadMessage("1700000000.000200", ROOT, "two")]
    await mark_read(
        fresh_db,
        "T1",
        "C1",
        ROOT,
        read,
        complete_from=None,
        complete_through="1700000000.000200",
        gap=12,
    )
    stream = await observe_message(fresh_db, seen("1700000000.000900", ROOT, extends=False))
    assert (stream.complete_through, stream.gap) == ("1700000000.000200", 12)
    await mark_read(
        fresh_db,
        "T1",
        "C1",
        ROOT,
        [],
        complete_from=None,
        complete_through="1700000000.000100",
        gap=None,
    )
    stream = await observe_message(fresh_db, seen("1700000000.000900", ROOT, extends=False))
    assert (stream.complete_through, stream.gap) == ("1700000000.000200", None)
    kept = await stored_messages(fresh_db, "T1", "C1", ROOT, before="1700000001.000000", limit=1)
    assert kept == [("1700000000.000900", "<turn>1700000000.000900</turn>")]


async def test_edits_and_deletions_apply_to_the_kept_copy(fresh_db: Database) -> None:
    """An edit replaces the kept text; a deletion removes it; either says whether there
    was one."""
    await observe_message(fresh_db, seen(ROOT))
    assert await revise_seen(fresh_db, "T1", "C1", ROOT, "<turn>new</turn>")
    kept = await stored_messages(fresh_db, "T1", "C1", "", before="1800000000.0", limit=5)
    assert kept == [(ROOT, "<turn>new</turn>")]
    assert await forget_seen(fresh_db, "T1", "C1", ROOT)
    assert not await forget_seen(fresh_db, "T1", "C1", ROOT)
    assert await stored_messages(fresh_db, "T1", "C1", "", before="1800000000.0", limit=5) == []


async def test_retention_deletes_old_kept_messages_and_what_their_streams_claimed(
    fresh_db: Database,
) -> None:
    """Kept messages past the retention go, and with each the record of its thread and
    channel (no longer known complete); recent ones and their streams stay."""
    await observe_message(fresh_db, seen(ROOT, team="TOLD"))
    await observe_message(fresh_db, seen("1700000000.000200", ROOT, team="TOLD"))
    await observe_message(fresh_db, seen(ROOT, team="TNEW"))
    await fresh_db.pool.execute(
        "UPDATE slack_messages SET created_at = now() - interval '40 days' WHERE team = 'TOLD'"
    )
    run = await Retention(fresh_db, days=30).run()
    assert run is not None and run.deleted.get("slack_messages") == 2
    teams = {r["team"] for r in await fresh_db.pool.fetch("SELECT team FROM slack_messages")}
    streams = {r["team"] for r in await fresh_db.pool.fetch("SELECT team FROM slack_streams")}
    assert teams == {"TNEW"} and streams == {"TNEW"}


async def test_a_channels_context_is_its_newest_kept_messages_and_where_it_is_whole(
    fresh_db: Database,
) -> None:
    """One read gives a top-level mention its channel's newest kept messages before it,
    oldest first, and from where the store holds the channel whole; a channel never seen
    gives none, from nowhere."""
    assert await channel_messages(fresh_db, "T1", "C9", before=ROOT, limit=5) == ([], None)
    stamps = [f"1700000001.00000{n}" for n in range(4)]
    for ts in stamps:
        await observe_message(fresh_db, seen(ts))
    top, start = await channel_messages(fresh_db, "T1", "C1", before=stamps[3], limit=2)
    assert [ts for ts, _ in top] == stamps[1:3] and start == stamps[0]
