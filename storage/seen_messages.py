"""The messages the app receives, kept, so that context is read from Postgres first.

Every person's message event in a conversation the app takes part in is kept in
`slack_messages` (migration 025), rendered as the model reads it (the gateway renders it:
a provenance tag, pasted credentials redacted), under the retention TTL (storage/retention.py).
Its streams — its thread, and for a message at the top of a channel the channel's top
level — say through which message the store is known complete (`slack_streams`), so a
back-fill, a refresh after a re-mention or a channel's recent messages are read from here
and Slack is asked only for what was never seen (gateway/inbound/context.py decides).

How a stream becomes complete: a message at the top of a channel begins its thread, so
that thread is complete from its root; a `message` event extends a stream known complete
(Slack sends one for every message of the conversations the app subscribes to, in order
of their ts); a read from Slack marks what it read (`mark_read`). What could not be read is
remembered as the stream's `gap`, for its next turn to read, paced.

Edits replace a kept message's text, deletions delete it (gateway/inbound/revisions.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from storage.database import Database
from storage.errors import translate_errors
from storage.migrations import Connection

# A thread's stream holds its root (kept at the top of the channel) and its replies; the
# top of a channel (root '') holds the messages there. $5 how many, newest first; $4 the
# ts they come before.
_STORED = """
SELECT ts, text FROM slack_messages
WHERE team = $1 AND channel = $2
  AND (root = $3 OR ($3 <> '' AND ts = $3))
  AND ts::numeric < $4::numeric
ORDER BY ts::numeric DESC LIMIT $5
"""

# A read from Slack: the messages kept, and the stream marked complete from `$4` (NULL:
# the start as it was) through `$5`, its gap now `$6`.
_KEEP = """
INSERT INTO slack_messages (team, channel, ts, root, text)
SELECT $1, $2, m.ts, m.root, m.text FROM unnest($3::text[], $4::text[], $5::text[]) AS m (ts, root, text)
ON CONFLICT (team, channel, ts) DO NOTHING
"""
_MARK = """
INSERT INTO slack_streams AS s (team, channel, root, complete_from, complete_through, gap)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (team, channel, root) DO UPDATE SET
    complete_from = coalesce(excluded.complete_from, s.complete_from),
    complete_through = CASE WHEN s.complete_through IS NULL OR excluded.complete_through IS NULL
                              OR s.complete_through::numeric < excluded.complete_through::numeric
                            THEN coalesce(excluded.complete_through, s.complete_through)
                            ELSE s.complete_through END,
    gap = excluded.gap, updated_at = now()
"""


@dataclass(frozen=True, slots=True)
class SeenMessage:
    """A person's message as kept: where (`root` its thread's ts, '' at the top of a
    channel), its rendered text, whether its event extends its streams (a `message` event,
    not only an `app_mention`), and the session it would belong to."""

    team: str
    channel: str
    ts: str
    root: str
    text: str
    extends: bool
    session_id: str


@dataclass(frozen=True, slots=True)
class Stream:
    """What the store holds of a thread: every message through `complete_through` (None:
    nothing known complete); `gap` messages known not read (-1: some; None: none). `known`:
    the thread's session exists (the bot takes part in it)."""

    complete_through: str | None = None
    gap: int | None = None
    known: bool = False


@dataclass(frozen=True, slots=True)
class ReadMessage:
    """A message read from Slack, rendered, to be kept (`root` as in `SeenMessage`)."""

    ts: str
    root: str
    text: str


@translate_errors("The message could not be kept")
async def observe_message(db: Database, seen: SeenMessage) -> Stream:
    """Keep the message and extend its streams (module docstring): its thread's stream
    as it is now, and whether the thread's session exists."""
    row = await db.admissions.fetchrow(
        "SELECT * FROM observe_message($1, $2, $3, $4, $5, $6, $7)",
        seen.team,
        seen.channel,
        seen.ts,
        seen.root,
        seen.text,
        seen.extends,
        seen.session_id,
    )
    assert row is not None
    return Stream(row["complete_through"], row["gap"], bool(row["known"]))


@translate_errors("The kept messages could not be read")
async def stored_messages(
    db: Database, team: str, channel: str, root: str, *, before: str, limit: int
) -> list[tuple[str, str]]:
    """The kept messages of a stream (a thread by its root's ts; '' the channel's top
    level) before the ts `before`: the newest `limit`, oldest first, as (ts, text)."""
    rows = await db.admissions.fetch(_STORED, team, channel, root, before, limit)
    return [(r["ts"], r["text"]) for r in reversed(rows)]


# A channel's top level before a mention, as a top-level mention's context reads it:
# `_STORED` of the stream '' ($3), oldest first, and from where the store holds the channel
# without a break (NULL: from nowhere), in one round trip.
_CHANNEL = (
    "WITH kept AS ("
    + _STORED
    + """)
SELECT (SELECT complete_from FROM slack_streams
        WHERE team = $1 AND channel = $2 AND root = $3) AS complete_from,
       coalesce(array_agg(ts ORDER BY ts::numeric), '{}') AS ts,
       coalesce(array_agg(text ORDER BY ts::numeric), '{}') AS texts
FROM kept
"""
)


@translate_errors("The channel's kept messages could not be read")
async def channel_messages(
    db: Database, team: str, channel: str, *, before: str, limit: int
) -> tuple[list[tuple[str, str]], str | None]:
    """The kept messages of the channel's top level before the ts `before` (the newest
    `limit`, oldest first, as (ts, text)), and the ts from which the store holds the top
    level complete (None: it does not)."""
    row = await db.admissions.fetchrow(_CHANNEL, team, channel, "", before, limit)
    assert row is not None  # an aggregate: one row, even of no messages
    return list(zip(row["ts"], row["texts"], strict=True)), row["complete_from"]


@translate_errors("The messages read could not be kept")
async def mark_read(
    db: Database,
    team: str,
    channel: str,
    root: str,
    read: Sequence[ReadMessage],
    *,
    complete_from: str | None,
    complete_through: str | None,
    gap: int | None,
) -> None:
    """Keep what a Slack read brought and mark its stream: complete from `complete_from`
    (None: as it was) through `complete_through` (None: as it was), `gap` not read."""
    async with db.admissions.acquire() as conn, conn.transaction():
        await _keep(conn, team, channel, read)
        await conn.execute(_MARK, team, channel, root, complete_from, complete_through, gap)


async def _keep(conn: Connection, team: str, channel: str, read: Sequence[ReadMessage]) -> None:
    if read:
        columns = ([m.ts for m in read], [m.root for m in read], [m.text for m in read])
        await conn.execute(_KEEP, team, channel, *columns)


@translate_errors("The kept message could not be revised")
async def revise_seen(db: Database, team: str, channel: str, ts: str, text: str) -> bool:
    """An edit: the kept message's new text; whether one was kept."""
    status = await db.admissions.execute(
        "UPDATE slack_messages SET text = $4 WHERE team = $1 AND channel = $2 AND ts = $3",
        team,
        channel,
        ts,
        text,
    )
    return status.endswith(" 1")


@translate_errors("The kept message could not be deleted")
async def forget_seen(db: Database, team: str, channel: str, ts: str) -> bool:
    """A deletion: the kept message goes; whether one was kept."""
    status = await db.admissions.execute(
        "DELETE FROM slack_messages WHERE team = $1 AND channel = $2 AND ts = $3",
        team,
        channel,
        ts,
    )
    return status.endswith(" 1")


@translate_errors("The stored turns could not be looked up")
async def stored_ids(db: Database, ids: Sequence[str]) -> set[str]:
    """Which of `ids` are messages of a conversation already."""
    rows = await db.admissions.fetch("SELECT id FROM messages WHERE id = ANY($1::text[])", ids)
    return {r["id"] for r in rows}


@translate_errors("The message could not be kept in its conversation")
async def keep_in_session(db: Database, session_id: str, message_id: str, text: str) -> bool:
    """A person's message not addressed to the bot, kept in a conversation the bot takes
    part in as context for its next answer (no task); whether it was new there."""
    stored = await db.admissions.fetchval(
        "SELECT store_turn($1, $2, $3, NULL) FROM sessions WHERE id = $2",
        message_id,
        session_id,
        text,
    )
    return stored is not None
