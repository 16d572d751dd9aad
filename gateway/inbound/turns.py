"""An inbound message as the turns admission stores: its own, and its thread's earlier ones.

The gatekeeper (gateway/inbound/gatekeeper.py) decides what is read for a message
(`Reading`: its files, its thread's earlier messages) and by when; `TurnReader` reads it.
Names, file downloads and the back-fill run at once, each ending at the look-ups'
deadline; what did not arrive by then is done without — a user id stands in for a name, a
file is described as not read, and a back-fill keeps what it has and says what it missed.
A back-fill reads the store first and Slack only as its plan says (gateway/inbound/context.py),
and keeps what Slack gave; a top-level mention's channel context is read the same way.

Credentials in what people wrote are redacted as it is rendered (`gateway.text.secrets`),
counted in the `Redactions` given. In a channel shared with another organization (or
whose sharing is unknown), the turns of authors of other organizations say so
(`org="external"`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeAlias

from agent import Document, Image, RuntimeNote
from gateway.inbound.attachments import FileContent, FileReader, files_text, images_of, unread
from gateway.inbound.context import (
    Gap,
    Plan,
    ThreadContext,
    channel_note,
    context_message_id,
    earlier_message_id,
    gap_note,
)
from gateway.slack.events import InboundTurn, SharedFile
from gateway.slack.sharing import ChannelSharing
from gateway.slack.threads import (
    ThreadMessage,
    ThreadRead,
    foreign,
    render_message,
    rendered_note_part,
    slack_time,
)
from gateway.slack.users import NameDirectory
from gateway.text.markup import mentioned_user_ids
from gateway.text.secrets import Redactions
from storage import EarlierMessage, ReadMessage

# A turn's text, and the pictures (and PDFs kept as documents) stored with it.
Turn: TypeAlias = tuple[str, tuple[Image | Document, ...]]


class ThreadSource(Protocol):
    async def read(
        self,
        channel: str,
        thread_ts: str,
        *,
        team: str,
        limit: int,
        deadline: float | None = None,
        oldest: str | None = None,
        latest: str | None = None,
    ) -> ThreadRead:
        """At most the latest `limit` messages after `oldest`, oldest first, paced in
        `team`'s workspace; at `deadline` (event-loop time), what was read so far."""


@dataclass(frozen=True, slots=True)
class Reading:
    """What is read for a message before its admission: its thread's earlier messages as
    `plan` says (gateway/inbound/context.py; None: none), and its files (and theirs) with
    `files`; None: described, not read."""

    plan: Plan | None = None
    files: FileReader | None = None

    @property
    def backfill(self) -> bool:
        return self.plan is not None


@dataclass(frozen=True, slots=True)
class Earlier:
    """What was read before a message: the earlier messages to store before its turn, and
    what could not be read (None: nothing is missing)."""

    messages: Sequence[EarlierMessage] = ()
    gap: Gap | None = None
    note: RuntimeNote | None = None  # after the turn: a gap, or what the channel's context is


NOTHING = Reading()


class TurnReader:
    """Renders messages as turns, with the names, files and threads of one workspace."""

    def __init__(
        self,
        users: NameDirectory,
        *,
        threads: ThreadSource | None,
        sharing: ChannelSharing | None,
        backfill_messages: int,
        context: ThreadContext | None = None,
    ) -> None:
        self._users = users
        self._threads = threads
        self._sharing = sharing
        self._backfill_messages = backfill_messages
        self._context = context  # the store first (None: Slack only, as in the console)

    async def shared(self, inbound: InboundTurn, deadline: float) -> InboundTurn:
        """The turn with its channel's sharing known, as the event said it or as
        `conversations.info` says (None: it could not be checked; see `ChannelRules`)."""
        if inbound.ext_shared is not None or self._sharing is None:
            return inbound
        sharing = await self._sharing.sharing(inbound.channel, deadline)
        if sharing == "unknown":
            return inbound
        return replace(inbound, ext_shared=sharing == "external")

    async def turn_and_earlier(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        deadline: float,
        reading: Reading,
        redactions: Redactions,
    ) -> tuple[Turn, Earlier]:
        """The turn and, with `reading.plan`, the thread's earlier messages, read at
        once. Only then gathered: a gather runs each part as a task of its own, and each
        costs the ack a turn of the event loop, behind whatever else the loop has to do."""
        turn = self.turn(inbound, bot_user_id, deadline, reading.files, redactions)
        if reading.plan is None:
            return await turn, Earlier()
        return await asyncio.gather(
            turn,
            self._backfill(inbound, bot_user_id, deadline, reading.plan, reading.files, redactions),
        )

    async def turn(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        deadline: float,
        files: FileReader | None,
        redactions: Redactions,
    ) -> Turn:
        """The turn's text and its pictures (and PDFs kept as documents): names and files
        looked up at once."""
        user_ids = [inbound.user, *mentioned_user_ids(inbound.text)]
        if files is None or not inbound.files:  # nothing to download: no gather (above)
            names, contents = await self._names(user_ids, deadline), unread(inbound.files)
        else:
            names, contents = await asyncio.gather(
                self._names(user_ids, deadline), _read_files(files, inbound.files, deadline)
            )
        text = render_inbound(
            inbound, names, bot_user_id=bot_user_id, contents=contents, redactions=redactions
        )
        return text, images_of(contents, rendered_note_part)

    async def text_with_note(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        deadline: float,
        files_note: str,
        redactions: Redactions,
    ) -> str:
        """The turn's text with `files_note` as what it says of its files."""
        names = await self._names([inbound.user, *mentioned_user_ids(inbound.text)], deadline)
        return render_inbound(
            inbound, names, bot_user_id=bot_user_id, files_note=files_note, redactions=redactions
        )

    async def _backfill(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        deadline: float,
        plan: Plan,
        files: FileReader | None,
        redactions: Redactions,
    ) -> Earlier:
        """The thread's messages before this one, as turns with ids from their ts: the
        store's, and Slack's when the plan says (kept for the next time), the newest
        `backfill_messages` of them; what Slack did not give in time is the gap."""
        if plan.channel:
            return await self._channel(inbound, bot_user_id, deadline, plan, redactions)
        context = self._context
        stored = await context.stored(inbound, plan) if context is not None else []
        read, fresh = await self._read_slack(
            inbound, bot_user_id, deadline, plan, files, redactions
        )
        gap = None
        if context is not None and read is not None:
            kept = [
                ReadMessage(ts, plan.root if ts != plan.root else "", m.text) for ts, m in fresh
            ]
            gap = await context.read(inbound, plan, read, kept)
        by_ts = {
            ts: EarlierMessage(earlier_message_id(inbound.team, inbound.channel, ts), text)
            for ts, text in stored
        }
        by_ts.update(fresh)
        before = sorted((ts for ts in by_ts if _ts_key(ts) < _ts_key(inbound.ts)), key=_ts_key)
        before = before[-self._backfill_messages :]
        if context is not None and plan.known:
            new = await context.new_in_session(inbound, before)
            before = [ts for ts in before if ts in new]
        note = None if gap is None else gap_note(gap)
        return Earlier(tuple(by_ts[ts] for ts in before), gap, note)

    async def _channel(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        deadline: float,
        plan: Plan,
        redactions: Redactions,
    ) -> Earlier:
        """A top-level mention's channel context: the channel's latest messages before it,
        from the store when it holds them all, else from one paced conversations.history
        call (kept for the next time); each as its author's turn, with a note saying what
        they are (gateway/inbound/context.py)."""
        if self._context is None:
            return Earlier()
        stored, whole = await self._context.channel_stored(inbound, plan)
        by_ts = dict(stored)
        if not whole and self._threads is not None:
            read = await self._threads.read(
                inbound.channel,
                "",
                team=inbound.team,
                limit=plan.channel_messages,
                deadline=deadline,
                latest=inbound.ts,
            )
            fresh = await self._rendered(
                inbound, bot_user_id, deadline, read.messages, None, redactions
            )
            kept = [ReadMessage(ts, "", m.text) for ts, m in fresh]
            await self._context.channel_read(inbound, plan, read, kept)
            by_ts.update((ts, m.text) for ts, m in fresh)
            whole = read.stopped is None
        before = sorted((ts for ts in by_ts if _ts_key(ts) < _ts_key(inbound.ts)), key=_ts_key)
        before = before[-plan.channel_messages :]
        messages = tuple(
            EarlierMessage(context_message_id(inbound, ts), by_ts[ts]) for ts in before
        )
        return Earlier(messages, None, channel_note(len(messages), whole=whole))

    async def _read_slack(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        deadline: float,
        plan: Plan,
        files: FileReader | None,
        redactions: Redactions,
    ) -> tuple[ThreadRead | None, list[tuple[str, EarlierMessage]]]:
        """What Slack gives of the thread after `plan.oldest`, paced, rendered (by ts)."""
        if self._threads is None or not plan.slack:
            return None, []
        read = await self._threads.read(
            inbound.channel,
            plan.root,
            team=inbound.team,
            limit=self._backfill_messages + 1,
            deadline=deadline,
            oldest=plan.oldest,
        )
        found = [m for m in read.messages if _ts_key(m.ts) < _ts_key(inbound.ts)]
        return read, await self._rendered(inbound, bot_user_id, deadline, found, files, redactions)

    async def _rendered(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        deadline: float,
        found: Sequence[ThreadMessage],
        files: FileReader | None,
        redactions: Redactions,
    ) -> list[tuple[str, EarlierMessage]]:
        """Messages read from Slack as the model reads them, with their files read."""
        users = {m.user for m in found} | {u for m in found for u in mentioned_user_ids(m.text)}
        names, contents = await asyncio.gather(
            self._names(sorted(users), deadline),
            asyncio.gather(*(_read_files(files, m.files, deadline) for m in found)),
        )
        shared = inbound.ext_shared is not False
        return [
            (
                m.ts,
                EarlierMessage(
                    earlier_message_id(inbound.team, inbound.channel, m.ts),
                    render_message(
                        m,
                        inbound.channel,
                        names,
                        bot_user_id=bot_user_id,
                        note=files_text(read),
                        external=shared and foreign(m.team, inbound.team, inbound.enterprise),
                        redactions=redactions,
                    ),
                    images_of(read, rendered_note_part),
                ),
            )
            for m, read in zip(found, contents, strict=True)
        ]

    async def _names(self, user_ids: list[str], deadline: float | None) -> dict[str, str]:
        try:
            async with asyncio.timeout_at(deadline):
                return await self._users.names(user_ids)
        except TimeoutError:
            return {}  # the ids stand in: a name is decoration, the id is the identity


def render_inbound(
    inbound: InboundTurn,
    names: dict[str, str],
    *,
    bot_user_id: str | None,
    contents: Sequence[FileContent] | None = None,
    files_note: str | None = None,
    redactions: Redactions | None = None,
) -> str:
    """The message as the model will read it: its text, then what came of its files
    (`contents`; None: described, not read; or `files_note`, as rendered before), in one
    provenance tag; marked as another organization's when the channel is shared (or its
    sharing unknown) and its author's team is not the tenant's."""
    message = ThreadMessage(inbound.user, inbound.text, inbound.ts)
    read = unread(inbound.files) if contents is None else contents
    note = files_text(read, inbound.files_not_described) if files_note is None else files_note
    edited = slack_time(inbound.edited) if inbound.edited else None
    shared = inbound.ext_shared is not False
    return render_message(
        message,
        inbound.channel,
        names,
        bot_user_id=bot_user_id,
        note=note,
        edited=edited,
        external=shared and foreign(inbound.user_team, inbound.team, inbound.enterprise),
        redactions=redactions,
    )


async def _read_files(
    reader: FileReader | None, files: Sequence[SharedFile], deadline: float
) -> tuple[FileContent, ...]:
    if reader is None or not files:
        return unread(files)
    return await reader.read(files, deadline)


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, fraction = ts.partition(".")
    return int(seconds or 0), int(fraction.ljust(6, "0")[:6] or 0)
