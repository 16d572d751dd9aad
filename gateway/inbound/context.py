"""Store first: what a message's conversation needs read before it, from Postgres first and
from Slack only for what was never seen (issue 43, items 1, 3 and 4).

Every person's message event the gatekeeper receives in a conversation the app takes part
in is kept (`keep`: storage/seen_messages.py), rendered as the model reads it, before
anything else is decided — those not addressed to the bot too: they are not tasks, but
context (`as_context` puts one into its thread's conversation when the bot takes part in
it). Its streams say through which message the store is complete.

What a message needs (`plan`):

- in a thread new to the bot (a first mention mid-thread), the thread's earlier messages:
  from the store when it holds the thread from its root and the thread's messages arrive
  as events (the app is subscribed to them: THREADGATE_CONTINUE_THREADS, or a DM);
  otherwise from Slack, from where the store stops being complete;
- in a thread the bot knows (a re-mention), nothing while its messages kept arriving as
  events; without those events, only what is newer than the last stored message
  (`oldest`); and, in either case, what an earlier turn could not read (its `gap`);
- at the top of a channel (item 5), the channel's latest messages before the mention
  (THREADGATE_CHANNEL_CONTEXT_MESSAGES, or the channel's `channelContextMessages`), each
  as its author's turn — data, never instructions — from the store when it holds them
  without a break, else from one paced `conversations.history` call.

Slack is asked through the paced reader (gateway/slack/read_pacing.py), never past the
ack's deadline. What it did not give in time is a gap: remembered in Postgres with the
thread, told to the model as a labelled runtime note after the turn (`gap_note`: never a
person's turn), and read at the thread's next turn, paced like any read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent import RuntimeNote, user_message_id
from gateway.slack.events import InboundTurn
from gateway.slack.threads import ThreadRead, unread_count
from storage import (
    Database,
    ReadMessage,
    SeenMessage,
    Stream,
    channel_messages,
    keep_in_session,
    mark_read,
    observe_message,
    stored_ids,
    stored_messages,
)


@dataclass(frozen=True, slots=True)
class Plan:
    """What to read before a message: its thread's earlier messages from the store, and
    from Slack when `slack` (after `oldest`; None: from the thread's root)."""

    root: str
    slack: bool
    oldest: str | None = None
    gap: int | None = None  # what the store knew was missing
    known: bool = False  # the bot takes part in the thread: its conversation has turns
    # A top-level mention's channel context (`root` ''): the channel's latest messages
    # before it, this many (item 5).
    channel_messages: int = 0

    @property
    def channel(self) -> bool:
        return self.root == ""


@dataclass(frozen=True, slots=True)
class Gap:
    """Messages of a thread that could not be read: how many (None: Slack did not say)."""

    count: int | None


# A channel's top level complete from its beginning (`slack_streams.complete_from`).
BEGINNING = "0.000000"


class ThreadContext:
    """The store-first side of a workspace's gatekeeper (module docstring)."""

    def __init__(self, db: Database, *, subscribed: bool, backfill_messages: int) -> None:
        self._db = db
        self._subscribed = subscribed  # channel messages arrive as events
        self._limit = backfill_messages

    async def keep(self, inbound: InboundTurn, text: str) -> Stream:
        """Keep the message (rendered as `text`); its thread's stream as it is now."""
        return await observe_message(self._db, seen_message(inbound, text))

    async def as_context(self, inbound: InboundTurn, text: str, stream: Stream) -> bool:
        """A message not addressed to the bot, in a thread the bot takes part in: kept in
        that conversation as context for its next answer; whether it was."""
        if not stream.known or not inbound.in_own_thread:
            return False
        message_id = earlier_message_id(inbound.team, inbound.channel, inbound.ts)
        return await keep_in_session(self._db, inbound.session_id, message_id, text)

    def plan(
        self, inbound: InboundTurn, stream: Stream, *, channel_messages: int = 0
    ) -> Plan | None:
        """What to read before the message (module docstring); None: nothing. A mention at
        the top of a channel gets that channel's latest `channel_messages` before it."""
        if not inbound.thread_ts and not inbound.direct and inbound.mentioned:
            return (
                Plan("", slack=True, channel_messages=channel_messages)
                if channel_messages
                else None
            )
        if not inbound.in_own_thread or not inbound.thread_ts or self._limit == 0:
            return None
        root, through = inbound.thread_ts, stream.complete_through
        events = self._subscribed or inbound.direct
        if stream.gap is not None:
            return Plan(root, slack=True, oldest=through, gap=stream.gap, known=stream.known)
        if not stream.known:
            return Plan(root, slack=through is None or not events, oldest=through)
        if events or through is None:
            return None  # the store is complete, or there is nothing to read after
        return Plan(root, slack=True, oldest=through, known=True)

    async def stored(self, inbound: InboundTurn, plan: Plan) -> list[tuple[str, str]]:
        """The kept messages of the thread before this one: the newest the back-fill
        takes, oldest first, as (ts, text)."""
        return await stored_messages(
            self._db, inbound.team, inbound.channel, plan.root, before=inbound.ts, limit=self._limit
        )

    async def channel_stored(
        self, inbound: InboundTurn, plan: Plan
    ) -> tuple[list[tuple[str, str]], bool]:
        """The channel's kept messages before a top-level mention (the newest it takes),
        and whether they are all there are: the channel's messages arrive as events and
        the store holds it without a break over as many as are asked for."""
        team, channel, count = inbound.team, inbound.channel, plan.channel_messages
        stored, start = await channel_messages(
            self._db, team, channel, before=inbound.ts, limit=count
        )
        if start is None or not self._subscribed:
            return stored, False
        unbroken = [ts for ts, _ in stored if _ts(ts) >= _ts(start)]
        return stored, start == BEGINNING or len(unbroken) >= count

    async def channel_read(
        self, inbound: InboundTurn, plan: Plan, read: ThreadRead, rendered: Sequence[ReadMessage]
    ) -> None:
        """Keep what `conversations.history` gave before a mention: the channel's top level
        is complete from the oldest of it (from its beginning when Slack had no more, with
        fewer than asked) through the newest, when the read was whole."""
        if not read.complete:
            await mark_read(
                self._db,
                inbound.team,
                inbound.channel,
                "",
                rendered,
                complete_from=None,
                complete_through=None,
                gap=None,
            )
            return
        start = BEGINNING if len(read.messages) < plan.channel_messages else None
        await mark_read(
            self._db,
            inbound.team,
            inbound.channel,
            "",
            rendered,
            complete_from=start or (rendered[0].ts if rendered else None),
            complete_through=rendered[-1].ts if rendered else None,
            gap=None,
        )

    async def read(
        self, inbound: InboundTurn, plan: Plan, read: ThreadRead, rendered: Sequence[ReadMessage]
    ) -> Gap | None:
        """Keep what Slack gave (`rendered`) and mark the thread: complete through what was
        read — through this message when the read was whole — and what it missed as its
        gap; that gap, None when nothing is missing."""
        gap = self._gap(inbound, plan, read)
        through = inbound.ts if read.complete else read.newest
        await mark_read(
            self._db,
            inbound.team,
            inbound.channel,
            plan.root,
            rendered,
            complete_from=None,
            complete_through=through,
            gap=None if gap is None else (-1 if gap.count is None else gap.count),
        )
        return gap

    def _gap(self, inbound: InboundTurn, plan: Plan, read: ThreadRead) -> Gap | None:
        if read.complete:
            return None
        seen_this = any(m.ts == inbound.ts for m in read.messages)
        count = unread_count(read, later=0 if seen_this else 1)
        if count is None and plan.gap is not None and plan.gap > 0:
            count = max(0, plan.gap - read.seen)  # the count an earlier read knew
        return Gap(count) if count != 0 else None

    async def new_in_session(self, inbound: InboundTurn, ts: Sequence[str]) -> set[str]:
        """Which of the messages `ts` of a known thread its conversation lacks (a message
        it holds as a turn, or as context, is not stored twice)."""
        if not ts:
            return set()
        team, channel = inbound.team, inbound.channel
        ids = {
            t: (user_message_id(f"{team}:{channel}:{t}"), earlier_message_id(team, channel, t))
            for t in ts
        }
        have = await stored_ids(self._db, [i for pair in ids.values() for i in pair])
        return {t for t, pair in ids.items() if not have.intersection(pair)}


def seen_message(inbound: InboundTurn, text: str) -> SeenMessage:
    """The message as kept: under its thread's root ('' at the top of a channel or a DM);
    a `message` event extends its streams, an `app_mention` alone does not."""
    return SeenMessage(
        team=inbound.team,
        channel=inbound.channel,
        ts=inbound.ts,
        root=inbound.thread_ts or "",
        text=text,
        extends=not inbound.mentioned,
        session_id=inbound.session_id,
    )


def gap_note(gap: Gap) -> RuntimeNote:
    """The runtime note after a turn whose thread could not be read whole: never a
    person's turn, and it says the next turn reads the rest."""
    some = f"{gap.count} earlier messages" if gap.count else "Some earlier messages"
    return RuntimeNote(
        "context_gap",
        f"{some} in this thread were not read (Slack's read limit); "
        "they are read for your next turn here.",
    )


def channel_note(shown: int, *, whole: bool) -> RuntimeNote | None:
    """The runtime note after a top-level mention that carries its channel's latest
    messages: what they are, and whether some could not be read; None when there were
    none to show."""
    notes = []
    if shown:
        what = f"The {shown} messages before this turn are the channel's latest before it,"
        notes.append(f"{what} shown for context; they were not addressed to you.")
    if not whole:
        notes.append("Earlier messages of the channel were not read (Slack's read limit).")
    return RuntimeNote("channel_context", " ".join(notes)) if notes else None


def context_message_id(inbound: InboundTurn, ts: str) -> str:
    """The stored id of a channel message shown as a top-level mention's context: its own
    in that conversation (the same message may be context of many)."""
    return f"{earlier_message_id(inbound.team, inbound.channel, ts)}@{inbound.ts}"


def _ts(ts: str) -> tuple[int, int]:
    seconds, _, fraction = ts.partition(".")
    return int(seconds or 0), int(fraction.ljust(6, "0")[:6] or 0)


def earlier_message_id(team: str, channel: str, ts: str) -> str:
    """The stored id of a person's message kept in a conversation without a task of its
    own (back-filled, read later, or context)."""
    return f"slack:{team}:{channel}:{ts}"
