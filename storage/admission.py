"""Making an incoming message durable: the one transaction that must commit before the ack.

Admission records, atomically: the delivery (by event id), the session, the user's turn
and the task that will answer it. A delivery seen before, or a second event for a message
that already has a task (Slack sends both `message` and `app_mention` for one mention),
admits nothing. The NOTIFY in the same transaction wakes a worker the moment it commits.
Its statements run on the admission connections (`Database.admissions`), where no reply
work holds one while an ack waits.

The guard rails against abuse and runaway cost are checked in the same statement, so they
hold across replicas (`Limits`): messages per user and per thread in the clock hour, the
tokens a user and a channel used today, and what a channel and a workspace spent today
(in USD, by the price table: storage/usage.py). The hourly counters are rows bumped by an
upsert, whose row lock serialises concurrent admissions: two replicas cannot both slip
past a limit. The token budgets read what the model responses recorded (storage/usage.py),
so tasks already running when a budget runs out may go past it by what they use.

An over-limit message is acked and nothing is queued for it, except for the first one of
its window: that one claims the window's `limit_notices` row and becomes a task whose
reply — the polite notice — is stored with it. The runner then finds the reply stored and
posts it through the outbox like any reply (after the ack, exactly once, in the thread's
order), without asking a model. Every later over-limit message of the window is acked and
dropped.

A message with pictures (or PDFs kept for the models that read documents), or with
back-filled messages, is admitted statement by statement in one transaction: the
attachments are weighed against their budgets there (storage/pictures.py), and one past a
budget is not stored; the message says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal, TypeAlias, get_args

import asyncpg

from agent import Document, Image, reply_id, user_message_id
from storage.database import TASKS_CHANNEL, Database
from storage.errors import translate_errors
from storage.migrations import Connection
from storage.pictures import NO_BUDGETS, PictureBudgets, count_pictures, keep_pictures


@dataclass(frozen=True, slots=True)
class EarlierMessage:
    """A message that preceded the turn in its thread (back-fill), already rendered."""

    id: str
    text: str
    images: tuple[Image | Document, ...] = ()  # pictures and kept PDFs, in file order


@dataclass(frozen=True, slots=True)
class Admission:
    event_id: str | None
    task_id: str
    session_id: str
    address: Mapping[str, str]
    turn_text: str
    earlier: Sequence[EarlierMessage] = field(default_factory=tuple)
    user: str | None = None  # who wrote it ("team:user"), for the limits and the usage
    channel: str | None = None  # where ("team:channel"), for the channel's token budget
    # Pictures shown with the turn, and PDFs kept for the models that read documents, in
    # file order: stored beside it.
    images: tuple[Image | Document, ...] = ()
    refused: LimitScope | None = None  # one of `REFUSALS`: the channel is not answered
    traceparent: str | None = None  # the message's trace, stored with its task

    @property
    def workspace(self) -> str | None:
        """The installation's team, for the workspace's spend limit."""
        return self.address.get("team")


LimitScope: TypeAlias = Literal[
    "user",
    "thread",
    "user_tokens",
    "channel_tokens",
    "all_tokens",
    "channel_spend",
    "workspace_spend",
    "external",
    "unverified",
]
LIMIT_SCOPES: tuple[LimitScope, ...] = get_args(LimitScope)
# Not limits but refusals of the channel (`Admission.refused`): shared with another
# organization, or its sharing could not be checked. Acked and noticed like a limit.
REFUSALS: frozenset[LimitScope] = frozenset({"external", "unverified"})


@dataclass(frozen=True, slots=True)
class Limits:
    """What one user and one thread may ask for, and every workspace together
    (`all_daily_tokens`); 0 means no limit. `notices` is the text posted once per window,
    by the scope that refused the message (for `all_tokens`, once per user and day).
    `pictures` bounds the pictures stored (storage/pictures.py): past it the message is
    admitted without them."""

    user_messages_per_hour: int = 0
    thread_messages_per_hour: int = 0
    user_daily_tokens: int = 0
    channel_daily_tokens: int = 0
    all_daily_tokens: int = 0
    # USD a channel, and a workspace, may spend per UTC day (unpriced models count nothing).
    channel_daily_spend_usd: float = 0
    workspace_daily_spend_usd: float = 0
    notices: Mapping[LimitScope, str] = field(default_factory=dict)
    pictures: PictureBudgets = NO_BUDGETS


UNLIMITED = Limits()
FALLBACK_NOTICE = "Sorry, this message is over a usage limit, so I won't answer it."


@dataclass(frozen=True, slots=True)
class Admitted:
    """How admission went. True (as a bool) when a task to answer the message was stored.

    `limited` names the limit that refused the message (the first that applies, in the
    order of `LIMIT_SCOPES`); `noticed` says whether this message claimed its window's
    notice (a task that only posts the notice was stored)."""

    admitted: bool
    limited: LimitScope | None = None
    noticed: bool = False

    def __bool__(self) -> bool:
        return self.admitted


# $4 what the text says of pictures not kept (storage/pictures.py), appended to it.
_INSERT_TURN = """
WITH s AS (SELECT nextval(pg_get_serial_sequence('messages', 'seq')) AS seq)
INSERT INTO messages (seq, id, session_id, anchor, role, kind, text, pictures_note)
SELECT s.seq, $1, $2, s.seq, 'user', 'turn', $3 || coalesce($4, ''), $4 FROM s
ON CONFLICT (id) DO NOTHING
"""


# The gate: the delivery, the hourly counters, the budgets and the notice claim. Nothing
# after `go` happens for a delivery seen before or a message that has its task already.
# $1 event id, $2 session, $3 task, $4 user, $5 channel, $6-$10 the limits (0: none), $11
# the workspace, $12-$13 its channel's and its own spend limits, $14 the refusal of a
# channel (`REFUSALS`; NULL: none), which outranks every limit and whose notice is claimed
# once per thread and day. The budget of every workspace together sums today's channel
# rows, only when it is set.
_GATE = """
WITH ev AS (
    INSERT INTO seen_events (event_id) SELECT $1::text WHERE $1::text IS NOT NULL{known}
    ON CONFLICT DO NOTHING RETURNING true
), go AS (
    SELECT true WHERE ($1::text IS NULL OR EXISTS (SELECT 1 FROM ev))
      AND NOT EXISTS (SELECT 1 FROM tasks WHERE id = $3){known}
), counted AS (
    INSERT INTO admission_counts (scope, key, window_start, messages)
    SELECT c.scope, c.key, date_trunc('hour', now(), 'UTC'), 1
    FROM go, (VALUES ('user', $4::text, $6::int), ('thread', $2::text, $7::int))
         AS c (scope, key, cap)
    WHERE c.key IS NOT NULL AND c.cap > 0
    ON CONFLICT (scope, key, window_start)
    DO UPDATE SET messages = admission_counts.messages + 1
    RETURNING scope, key, messages
), spent AS (
    SELECT u.scope, u.key, u.input_tokens + u.output_tokens AS tokens, u.cost_usd AS spent
    FROM usage_daily u
    WHERE u.day = (now() AT TIME ZONE 'UTC')::date
      AND ((u.scope = 'user' AND u.key = $4::text AND $8::bigint > 0)
           OR (u.scope = 'channel' AND u.key = $5::text
               AND ($9::bigint > 0 OR $12::numeric > 0))
           OR (u.scope = 'workspace' AND u.key = $11::text AND $13::numeric > 0))
), over AS (
    SELECT o.scope, o.key, o.window_start FROM go, (
        SELECT 0 AS rank, $14::text AS scope, $2::text AS key,
               date_trunc('day', now(), 'UTC') AS window_start
        WHERE $14::text IS NOT NULL
        UNION ALL
        SELECT 1, 'user', key, date_trunc('hour', now(), 'UTC')
        FROM counted WHERE scope = 'user' AND messages > $6::int
        UNION ALL
        SELECT 2, 'thread', key, date_trunc('hour', now(), 'UTC')
        FROM counted WHERE scope = 'thread' AND messages > $7::int
        UNION ALL
        SELECT 3, 'user_tokens', key, date_trunc('day', now(), 'UTC')
        FROM spent WHERE scope = 'user' AND tokens >= $8::bigint
        UNION ALL
        SELECT 4, 'channel_tokens', key, date_trunc('day', now(), 'UTC')
        FROM spent WHERE scope = 'channel' AND $9::bigint > 0 AND tokens >= $9::bigint
        UNION ALL
        SELECT 6, 'channel_spend', key, date_trunc('day', now(), 'UTC')
        FROM spent WHERE scope = 'channel' AND $12::numeric > 0 AND spent >= $12::numeric
        UNION ALL
        SELECT 7, 'workspace_spend', key, date_trunc('day', now(), 'UTC')
        FROM spent WHERE scope = 'workspace' AND spent >= $13::numeric
        UNION ALL
        SELECT 5, 'all_tokens', coalesce($4::text, $5::text, '*'), date_trunc('day', now(), 'UTC')
        FROM (
            SELECT sum(a.input_tokens + a.output_tokens) AS tokens FROM usage_daily a
            WHERE $10::bigint > 0 AND a.scope = 'channel'
              AND a.day = (now() AT TIME ZONE 'UTC')::date
        ) everyone WHERE everyone.tokens >= $10::bigint
    ) o
    ORDER BY o.rank LIMIT 1
), notice AS (
    INSERT INTO limit_notices (scope, key, window_start, task_id)
    SELECT scope, key, window_start, $3 FROM over
    ON CONFLICT DO NOTHING RETURNING scope
), pass AS (
    SELECT true FROM go WHERE NOT EXISTS (SELECT 1 FROM over)
    UNION ALL
    SELECT true FROM notice
)"""

# `_GATE` as it is, and for a session that must exist already (`admit_in_known_session`):
# in a session new to us nothing passes, and the delivery is not recorded as seen.
_IN_KNOWN_SESSION = "\n      AND EXISTS (SELECT 1 FROM sessions WHERE id = $2)"

# The common case in one statement (one implicit transaction): the gate, then the session,
# the task, the turn (its own anchor), the notice as the task's stored reply when this
# message claimed one, and the wake-up. `known` says whether the session existed before.
_ADMIT_ANY = (
    _GATE
    + """, ses AS (
    INSERT INTO sessions (id) SELECT $2 FROM pass ON CONFLICT DO NOTHING
), task AS (
    INSERT INTO tasks (id, session_id, address, user_id, channel, traceparent)
    SELECT $3, $2, $15::jsonb, $4, $5, $22 FROM pass
    ON CONFLICT DO NOTHING RETURNING id
), turn AS (
    INSERT INTO messages (seq, id, session_id, anchor, role, kind, text)
    SELECT s.seq, $16, $2, s.seq, 'user', 'turn', $17
    FROM task, LATERAL (SELECT nextval(pg_get_serial_sequence('messages', 'seq')) AS seq) s
    ON CONFLICT (id) DO NOTHING
    RETURNING seq
), reply AS (
    INSERT INTO messages (id, session_id, anchor, role, kind, text)
    SELECT $20, $2, turn.seq, 'assistant', 'reply',
           coalesce($19::jsonb ->> notice.scope, $21)
    FROM turn, notice
    ON CONFLICT (id) DO NOTHING
)
SELECT (SELECT count(pg_notify($18, '')) > 0 FROM task) AS created,
       (SELECT scope FROM over) AS limited,
       EXISTS (SELECT 1 FROM notice) AS noticed,
       EXISTS (SELECT 1 FROM sessions WHERE id = $2) AS known
"""
)
_ADMIT = _ADMIT_ANY.format(known="")
_ADMIT_KNOWN = _ADMIT_ANY.format(known=_IN_KNOWN_SESSION)

# A message's pictures and documents; the bytes stored, for the budgets' counters.
_INSERT_IMAGES = """
WITH stored AS (
    INSERT INTO message_attachments (message_id, ordinal, name, media_type, data, pages)
    SELECT $1, a.ordinal, a.name, a.media_type, a.data, a.pages
    FROM unnest($2::text[], $3::text[], $4::bytea[], $5::int[])
         WITH ORDINALITY AS a (name, media_type, data, pages, ordinal)
    ON CONFLICT DO NOTHING
    RETURNING octet_length(data) AS size
)
SELECT coalesce(sum(size), 0) FROM stored
"""


# The gate alone, for the admission that stores the rest statement by statement (with
# back-fill or pictures): the same rows `_ADMIT` writes, which
# tests/storage/test_admission.py holds it to.
_GATE_ONLY = (
    _GATE
    + """
SELECT EXISTS (SELECT 1 FROM pass) AS pass,
       (SELECT scope FROM over) AS limited,
       EXISTS (SELECT 1 FROM notice) AS noticed
"""
).format(known="")


@translate_errors("The session could not be looked up")
async def session_exists(db: Database, session_id: str) -> bool:
    """Whether this conversation has been seen (the bot takes part in it)."""
    return bool(await db.admissions.fetchval("SELECT true FROM sessions WHERE id = $1", session_id))


# Before the files of a message are downloaded: whether it has its task already, and the
# limit its admission would refuse it by (the `over` of `_GATE`, read without counting:
# `messages` there is the count after this message, here the count before it).
# $1 task, $2 user, $3 thread (session), $4 channel, $5-$9 the limits (0: none), $10 the
# workspace, $11-$12 the spend limits.
_BEFORE_DOWNLOADS = """
SELECT EXISTS (SELECT 1 FROM tasks WHERE id = $1) AS has_task, (
    SELECT o.scope FROM (
        SELECT 1 AS rank, 'user' AS scope FROM admission_counts
        WHERE $5::int > 0 AND scope = 'user' AND key = $2::text
          AND window_start = date_trunc('hour', now(), 'UTC') AND messages >= $5::int
        UNION ALL
        SELECT 2, 'thread' FROM admission_counts
        WHERE $6::int > 0 AND scope = 'thread' AND key = $3::text
          AND window_start = date_trunc('hour', now(), 'UTC') AND messages >= $6::int
        UNION ALL
        SELECT 3, 'user_tokens' FROM usage_daily
        WHERE $7::bigint > 0 AND scope = 'user' AND key = $2::text
          AND day = (now() AT TIME ZONE 'UTC')::date
          AND input_tokens + output_tokens >= $7::bigint
        UNION ALL
        SELECT 4, 'channel_tokens' FROM usage_daily
        WHERE $8::bigint > 0 AND scope = 'channel' AND key = $4::text
          AND day = (now() AT TIME ZONE 'UTC')::date
          AND input_tokens + output_tokens >= $8::bigint
        UNION ALL
        SELECT 5, 'all_tokens' FROM (
            SELECT sum(input_tokens + output_tokens) AS tokens FROM usage_daily
            WHERE $9::bigint > 0 AND scope = 'channel'
              AND day = (now() AT TIME ZONE 'UTC')::date
        ) everyone WHERE everyone.tokens >= $9::bigint
        UNION ALL
        SELECT 6, 'channel_spend' FROM usage_daily
        WHERE $11::numeric > 0 AND scope = 'channel' AND key = $4::text
          AND day = (now() AT TIME ZONE 'UTC')::date AND cost_usd >= $11::numeric
        UNION ALL
        SELECT 7, 'workspace_spend' FROM usage_daily
        WHERE $12::numeric > 0 AND scope = 'workspace' AND key = $10::text
          AND day = (now() AT TIME ZONE 'UTC')::date AND cost_usd >= $12::numeric
    ) o ORDER BY o.rank LIMIT 1
) AS limited
"""


@dataclass(frozen=True, slots=True)
class BeforeDownloads:
    """What admission would say of a message, asked before its files are fetched:
    it has its task already, or it is over `limited`."""

    has_task: bool
    limited: LimitScope | None


@translate_errors("The limits could not be looked up")
async def before_downloads(db: Database, a: Admission, limits: Limits) -> BeforeDownloads:
    """Whether `a` (its turn not rendered yet) is worth its downloads: one read, nothing
    counted. The answer may be out of date by the time of admission, which decides."""
    row = await db.admissions.fetchrow(
        _BEFORE_DOWNLOADS,
        a.task_id,
        a.user,
        a.session_id,
        a.channel,
        limits.user_messages_per_hour,
        limits.thread_messages_per_hour,
        limits.user_daily_tokens,
        limits.channel_daily_tokens,
        limits.all_daily_tokens,
        a.workspace,
        _usd(limits.channel_daily_spend_usd),
        _usd(limits.workspace_daily_spend_usd),
    )
    assert row is not None
    limited = next((s for s in LIMIT_SCOPES if s == row["limited"]), None)
    return BeforeDownloads(bool(row["has_task"]), limited)


@translate_errors("The turn could not be stored")
async def admit(db: Database, a: Admission, limits: Limits = UNLIMITED) -> Admitted:
    """Make the turn and its task durable, within `limits`; see `Admitted`."""
    if not a.earlier and not a.images:  # the common case, in one round trip
        return _outcome(*await _admit_at_once(db, _ADMIT, a, limits))
    return await _admit_in_steps(db, a, limits)


@translate_errors("The turn could not be stored")
async def admit_in_known_session(
    db: Database, a: Admission, limits: Limits = UNLIMITED
) -> Admitted | None:
    """`admit` for a message with neither pictures nor back-fill, in a session that exists
    already; None, nothing written, when it does not (a thread new to us: its back-fill
    comes first). It saves the round trip that asks first (`session_exists`)."""
    assert not a.earlier and not a.images
    created, row = await _admit_at_once(db, _ADMIT_KNOWN, a, limits)
    return _outcome(created, row) if row["known"] else None


def _gate_of(a: Admission, limits: Limits) -> tuple[object, ...]:
    return (
        a.event_id,
        a.session_id,
        a.task_id,
        a.user,
        a.channel,
        limits.user_messages_per_hour,
        limits.thread_messages_per_hour,
        limits.user_daily_tokens,
        limits.channel_daily_tokens,
        limits.all_daily_tokens,
        a.workspace,
        _usd(limits.channel_daily_spend_usd),
        _usd(limits.workspace_daily_spend_usd),
        a.refused,
    )


async def _admit_at_once(
    db: Database, statement: str, a: Admission, limits: Limits
) -> tuple[bool, asyncpg.Record]:
    row = await db.admissions.fetchrow(
        statement,
        *_gate_of(a, limits),
        json.dumps(dict(a.address)),
        user_message_id(a.task_id),
        a.turn_text,
        TASKS_CHANNEL,
        json.dumps(dict(limits.notices)),
        reply_id(a.task_id),
        FALLBACK_NOTICE,
        a.traceparent,
    )
    assert row is not None
    return bool(row["created"]), row


async def _admit_in_steps(db: Database, a: Admission, limits: Limits) -> Admitted:
    """The admission of a message with pictures or back-fill, statement by statement."""
    gate = _gate_of(a, limits)
    async with db.admissions.acquire() as conn, conn.transaction():
        verdict = await conn.fetchrow(_GATE_ONLY, *gate)
        assert verdict is not None
        if not verdict["pass"]:
            return _outcome(False, verdict)
        created = await conn.fetchval(
            "WITH s AS (INSERT INTO sessions (id) VALUES ($1) ON CONFLICT DO NOTHING) "
            "INSERT INTO tasks (id, session_id, address, user_id, channel, traceparent) "
            "VALUES ($2, $1, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING true",
            a.session_id,
            a.task_id,
            json.dumps(dict(a.address)),
            a.user,
            a.channel,
            a.traceparent,
        )
        if not created:
            return _outcome(False, verdict)
        await _store_messages(conn, a, limits.pictures, noticed=bool(verdict["noticed"]))
        if verdict["noticed"]:
            await conn.execute(
                "INSERT INTO messages (id, session_id, anchor, role, kind, text) "
                "SELECT $1, $2, seq, 'assistant', 'reply', $4 FROM messages WHERE id = $3",
                reply_id(a.task_id),
                a.session_id,
                user_message_id(a.task_id),
                limits.notices.get(verdict["limited"], FALLBACK_NOTICE),
            )
        await conn.execute("SELECT pg_notify($1, '')", TASKS_CHANNEL)
    return _outcome(True, verdict)


def _usd(amount: float) -> Decimal:
    """A spend limit as the numeric it is compared with: its decimal text, not the binary
    fraction (0.01 as a float is a hair over 0.01, and a spend of exactly 0.01 would pass)."""
    return Decimal(str(amount))


def _image_columns(
    attachments: Sequence[Image | Document],
) -> tuple[list[str], list[str], list[bytes], list[int]]:
    """The attachments as the four arrays the statements unnest, in order."""
    return (
        [a.name for a in attachments],
        [a.media_type for a in attachments],
        [a.data for a in attachments],
        [a.pages if isinstance(a, Document) else 0 for a in attachments],
    )


async def _store_messages(
    conn: Connection, a: Admission, budgets: PictureBudgets, *, noticed: bool
) -> None:
    """The back-filled messages (none for a notice task: no model reads it), then the turn,
    each with the pictures the budgets keep: the turn's weighed first, then the others
    newest first."""
    earlier = () if noticed else tuple(a.earlier)
    messages = [(e.id, e.text, e.images) for e in earlier]
    messages.append((user_message_id(a.task_id), a.turn_text, a.images))
    workspace = a.address.get("team")
    newest_first = [images for _, _, images in reversed(messages)]
    kept = await keep_pictures(
        conn, budgets, session_id=a.session_id, workspace=workspace, messages=newest_first
    )
    stored = 0
    for (message_id, text, _), keep in zip(messages, reversed(kept), strict=True):
        await conn.execute(_INSERT_TURN, message_id, a.session_id, text, keep.note)
        stored += await _store_images(conn, message_id, keep.images)
    await count_pictures(conn, session_id=a.session_id, workspace=workspace, stored_bytes=stored)


async def _store_images(
    conn: Connection, message_id: str, images: Sequence[Image | Document]
) -> int:
    """Store the attachments; the bytes stored (none for a message that had its own)."""
    if not images:
        return 0
    return int(await conn.fetchval(_INSERT_IMAGES, message_id, *_image_columns(images)))


def _outcome(created: bool, row: asyncpg.Record) -> Admitted:
    limited = row["limited"]
    if limited is None:
        return Admitted(created)
    scope = next(s for s in LIMIT_SCOPES if s == limited)
    return Admitted(False, scope, bool(row["noticed"]) and created)
