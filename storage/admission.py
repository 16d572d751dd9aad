"""Making an incoming message durable: the one transaction that must commit before the ack.

Admission records, atomically: the delivery (by event id), the session, the user's turn
and the task that will answer it. A delivery seen before, or a second event for a message
that already has a task (Slack sends both `message` and `app_mention` for one mention),
admits nothing. The NOTIFY in the same transaction wakes a worker the moment it commits.
What it stores and each limit rule are written once, as SQL functions (migration 024):
the common case calls `admit_thread_turn` (one round trip, the ack's latency; migration
034: with the thread's earlier messages when none has a picture), a message with pictures
calls its pieces one by one, and a schedule's run stores its task and turn with the same
`open_task` and `store_turn` (storage/schedules.py).
Its statements run on the admission connections (`Database.admissions`), where no reply
work holds one while an ack waits.

The guard rails against abuse and runaway cost are checked in the same transaction, so they
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

A message with pictures (or PDFs kept for the models that read documents), in its text
or in its back-filled messages, is admitted statement by statement in one transaction: the
attachments are weighed against their budgets there (storage/pictures.py), and one past a
budget is not stored; the message says so.

The event's `action_token` (what workspace search needs, gateway/slack/search.py) is kept
with a task the admission created, in the same statement or transaction
(storage/action_tokens.py): the worker that claims the task finds it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal, TypeAlias, get_args

import asyncpg

from agent import Document, Image, RuntimeNote, reply_id, user_message_id
from storage.action_tokens import keep_action_token
from storage.database import TASKS_CHANNEL, Database, admitted_to
from storage.errors import translate_errors
from storage.migrations import Connection
from storage.notes import notes_json
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
    # A runtime note after the turn, kept beside it as a pictures' note is (an edit keeps
    # it): what of its conversation could not be read (gateway/inbound/context.py).
    note: RuntimeNote | None = None
    # The event's `action_token` (workspace search as its writer), kept while the task
    # lives (storage/action_tokens.py); a credential, so never shown.
    action_token: str | None = field(default=None, repr=False)

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


# The SQL is migration 024's (and 034's), each piece written once and used by every path:
# the fast path (`admit_thread_turn`, one round trip), the step path (its pieces one by
# one, pictures weighed between them) and a schedule's run (`open_task`, `store_turn`).
_GATE = (
    "SELECT * FROM admission_gate($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
)
# The action token is kept in the same statement, for a task this admission created.
_ADMIT = (
    "WITH admitted AS (SELECT * FROM admit_thread_turn($1, $2, $3, $4, $5, $6, $7, $8, $9,"
    " $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $25, $26,"
    " $27::jsonb)),"
    " kept AS (INSERT INTO task_action_tokens (task_id, token) SELECT $2, $24::text"
    " FROM admitted WHERE admitted.created AND $24::text IS NOT NULL)"
    " SELECT * FROM admitted"
)
_OPEN_TASK = "SELECT open_task($1, $2, $3::jsonb, $4, $5, $6, $7)"
_STORE_TURN = "SELECT store_turn($1, $2, $3, $4::jsonb)"
# Several turns of one session in one round trip, each by `store_turn`, in the arrays'
# order (volatile calls are made in the order of the ORDER BY): a thread's back-fill is
# often a dozen messages, once a statement each, most of the step path's cost.
_STORE_TURNS = """
SELECT store_turn(m.id, $1, m.text, m.notes)
FROM unnest($2::text[], $3::text[], $4::jsonb[]) WITH ORDINALITY AS m (id, text, notes, n)
ORDER BY m.n
"""
_STORE_NOTICE = "SELECT store_notice($1, $2, $3, $4, $5::jsonb, $6)"
# Before the files of a message are downloaded: whether it has its task already, and the
# limit its admission would refuse it by, read without counting it.
_BEFORE_DOWNLOADS = """
SELECT EXISTS (SELECT 1 FROM tasks WHERE id = $1) AS has_task,
       (SELECT scope FROM first_limit($2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 1))
       AS limited
"""

# A message's pictures and documents (a PDF's text layer with it, migration 030); the
# bytes stored, for the budgets' counters.
_INSERT_IMAGES = """
WITH stored AS (
    INSERT INTO message_attachments
        (message_id, ordinal, name, media_type, data, pages, in_turn, page_texts)
    SELECT $1, a.ordinal, a.name, a.media_type, a.data, a.pages, a.in_turn, a.page_texts::jsonb
    FROM unnest($2::text[], $3::text[], $4::bytea[], $5::int[], $6::text[], $7::text[])
         WITH ORDINALITY AS a (name, media_type, data, pages, in_turn, page_texts, ordinal)
    ON CONFLICT DO NOTHING
    RETURNING octet_length(data) AS size
)
SELECT coalesce(sum(size), 0) FROM stored
"""


@translate_errors("The session could not be looked up")
async def session_exists(db: Database, session_id: str) -> bool:
    """Whether this conversation has been seen (the bot takes part in it)."""
    return bool(await db.admissions.fetchval("SELECT true FROM sessions WHERE id = $1", session_id))


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
    row = await db.admissions.fetchrow(_BEFORE_DOWNLOADS, a.task_id, *_limit_args(a, limits))
    assert row is not None
    return BeforeDownloads(bool(row["has_task"]), _scope(row["limited"]))


@translate_errors("The turn could not be stored")
async def admit(db: Database, a: Admission, limits: Limits = UNLIMITED) -> Admitted:
    """Make the turn and its task durable, within `limits`; see `Admitted`."""
    if _at_once(a):  # the common case, in one round trip
        return _outcome(*await _admit_at_once(db, a, limits, known_only=False))
    return await _admit_in_steps(db, a, limits)


@translate_errors("The turn could not be stored")
async def admit_in_known_session(
    db: Database, a: Admission, limits: Limits = UNLIMITED
) -> Admitted | None:
    """`admit` for a message with neither pictures nor back-fill, in a session that exists
    already; None, nothing written, when it does not (a thread new to us: its back-fill
    comes first). It saves the round trip that asks first (`session_exists`)."""
    assert not a.earlier and not a.images
    created, row = await _admit_at_once(db, a, limits, known_only=True)
    return _outcome(created, row) if row["known"] else None


async def open_task(
    conn: Connection,
    *,
    session_id: str,
    task_id: str,
    address: Mapping[str, str],
    user: str | None,
    channel: str | None,
    traceparent: str | None = None,
    schedule: int | None = None,
) -> bool:
    """Store the session (unless it exists) and the task; whether the task is new."""
    return bool(
        await conn.fetchval(
            _OPEN_TASK,
            session_id,
            task_id,
            json.dumps(dict(address)),
            user,
            channel,
            traceparent,
            schedule,
        )
    )


async def store_turn(
    conn: Connection,
    message_id: str,
    session_id: str,
    text: str,
    *notes: RuntimeNote,
) -> None:
    """Store a turn, its own anchor, with its `notes` (what of its pictures was not kept,
    what of its conversation could not be read) kept beside its text: storage/notes.py."""
    await conn.execute(_STORE_TURN, message_id, session_id, text, notes_json(list(notes)))


async def store_turns(
    conn: Connection, session_id: str, turns: Sequence[tuple[str, str, Sequence[RuntimeNote]]]
) -> None:
    """`store_turn` for each (message id, text, notes), oldest first, in one statement."""
    await conn.execute(
        _STORE_TURNS,
        session_id,
        [message_id for message_id, _, _ in turns],
        [text for _, text, _ in turns],
        [notes_json(list(notes)) for _, _, notes in turns],
    )


def _limit_args(a: Admission, limits: Limits) -> tuple[object, ...]:
    """Who and where `a` is, and `limits`: the arguments of `first_limit` (migration 024)."""
    return (
        a.user,
        a.session_id,
        a.channel,
        a.workspace,
        a.refused,
        limits.user_messages_per_hour,
        limits.thread_messages_per_hour,
        limits.user_daily_tokens,
        limits.channel_daily_tokens,
        limits.all_daily_tokens,
        _usd(limits.channel_daily_spend_usd),
        _usd(limits.workspace_daily_spend_usd),
    )


def _gate_args(a: Admission, limits: Limits, *, known_only: bool) -> tuple[object, ...]:
    """The arguments of `admission_gate` (migration 024), which `admit_thread_turn` opens with."""
    return (a.event_id, a.task_id, *_limit_args(a, limits), known_only)


def _at_once(a: Admission) -> bool:
    """Whether `a` is admitted in one round trip: nothing to weigh against the pictures'
    budgets (no picture in it or its back-fill)."""
    return not a.images and not any(e.images for e in a.earlier)


async def _admit_at_once(
    db: Database, a: Admission, limits: Limits, *, known_only: bool
) -> tuple[bool, asyncpg.Record]:
    row = await db.admissions.fetchrow(
        _ADMIT,
        *_gate_args(a, limits, known_only=known_only),
        json.dumps(dict(a.address)),
        a.traceparent,
        user_message_id(a.task_id),
        a.turn_text,
        reply_id(a.task_id),
        json.dumps(dict(limits.notices)),
        FALLBACK_NOTICE,
        TASKS_CHANNEL,
        a.action_token or None,
        [e.id for e in a.earlier],
        [e.text for e in a.earlier],
        notes_json([a.note] if a.note else []),
    )
    assert row is not None
    return bool(row["created"]), row


async def _admit_in_steps(db: Database, a: Admission, limits: Limits) -> Admitted:
    """The admission of a message with pictures (in it or its back-fill):
    `admit_thread_turn`'s pieces one by one, the pictures weighed against their budgets
    before the messages are stored."""
    async with db.admissions.acquire() as conn, conn.transaction():
        verdict = await conn.fetchrow(_GATE, *_gate_args(a, limits, known_only=False))
        assert verdict is not None
        if not verdict["passed"]:
            return _outcome(False, verdict)
        created = await open_task(
            conn,
            session_id=a.session_id,
            task_id=a.task_id,
            address=a.address,
            user=a.user,
            channel=a.channel,
            traceparent=a.traceparent,
        )
        if not created:
            return _outcome(False, verdict)
        await keep_action_token(conn, a.task_id, a.action_token)
        await _store_messages(conn, a, limits.pictures, noticed=bool(verdict["noticed"]))
        if verdict["noticed"]:
            await conn.execute(
                _STORE_NOTICE,
                reply_id(a.task_id),
                a.session_id,
                user_message_id(a.task_id),
                verdict["limited"],
                json.dumps(dict(limits.notices)),
                FALLBACK_NOTICE,
            )
        await conn.execute("SELECT pg_notify($1, $2)", TASKS_CHANNEL, admitted_to(a.session_id))
    return _outcome(True, verdict)


def _usd(amount: float) -> Decimal:
    """A spend limit as the numeric it is compared with: its decimal text, not the binary
    fraction (0.01 as a float is a hair over 0.01, and a spend of exactly 0.01 would pass)."""
    return Decimal(str(amount))


def _image_columns(
    attachments: Sequence[Image | Document],
) -> tuple[list[str], list[str], list[bytes], list[int], list[str | None], list[str | None]]:
    """The attachments as the six arrays the statement unnests, in order."""
    documents = [a if isinstance(a, Document) else None for a in attachments]
    return (
        [a.name for a in attachments],
        [a.media_type for a in attachments],
        [a.data for a in attachments],
        [d.pages if d else 0 for d in documents],
        [d.in_turn or None if d else None for d in documents],
        [json.dumps(d.page_texts) if d and d.page_texts else None for d in documents],
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
    notes = [[keep.note] if keep.note else [] for keep in reversed(kept)]
    if a.note:  # the turn's own note, after its pictures'
        notes[-1].append(a.note)
    turns = [
        (message_id, text, own) for (message_id, text, _), own in zip(messages, notes, strict=True)
    ]
    await store_turns(conn, a.session_id, turns)
    stored = 0
    for (message_id, _, _), keep in zip(messages, reversed(kept), strict=True):
        stored += await _store_images(conn, message_id, keep.images)
    await count_pictures(conn, session_id=a.session_id, workspace=workspace, stored_bytes=stored)


async def _store_images(
    conn: Connection, message_id: str, images: Sequence[Image | Document]
) -> int:
    """Store the attachments; the bytes stored (none for a message that had its own)."""
    if not images:
        return 0
    return int(await conn.fetchval(_INSERT_IMAGES, message_id, *_image_columns(images)))


def _scope(found: str | None) -> LimitScope | None:
    return next((s for s in LIMIT_SCOPES if s == found), None)


def _outcome(created: bool, row: asyncpg.Record) -> Admitted:
    scope = _scope(row["limited"])
    if scope is None:
        return Admitted(created)
    return Admitted(False, scope, bool(row["noticed"]) and created)
