"""An inbound message as the turns admission stores: its own, and its thread's earlier ones.

The gatekeeper (gateway/inbound/gatekeeper.py) decides what is read for a message
(`Reading`: its files, its thread's earlier messages) and by when; `TurnReader` reads it.
Names, file downloads and the back-fill run at once, each ending at the look-ups'
deadline; what did not arrive by then is done without — a user id stands in for a name, a
file is described as not read, and a back-fill keeps the newest messages it has.

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

from agent import Document, Image
from gateway.inbound.attachments import FileContent, FileReader, files_text, images_of, unread
from gateway.slack.events import InboundTurn, SharedFile
from gateway.slack.sharing import ChannelSharing
from gateway.slack.threads import (
    ThreadMessage,
    foreign,
    render_message,
    rendered_note_part,
    slack_time,
)
from gateway.slack.users import NameDirectory
from gateway.text.markup import mentioned_user_ids
from gateway.text.secrets import Redactions
from storage import EarlierMessage

# A turn's text, and the pictures (and PDFs kept as documents) stored with it.
Turn: TypeAlias = tuple[str, tuple[Image | Document, ...]]


class ThreadSource(Protocol):
    async def messages(
        self, channel: str, thread_ts: str, *, limit: int, deadline: float | None = None
    ) -> list[ThreadMessage]:
        """At most the latest `limit` messages, oldest first; at `deadline` (event-loop
        time), what was read so far."""


@dataclass(frozen=True, slots=True)
class Reading:
    """What is read for a message before its admission: its thread's earlier messages
    (`backfill`), and its files (and theirs) with `files`; None: described, not read."""

    backfill: bool = False
    files: FileReader | None = None


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
    ) -> None:
        self._users = users
        self._threads = threads
        self._sharing = sharing
        self._backfill_messages = backfill_messages

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
    ) -> tuple[Turn, Sequence[EarlierMessage]]:
        """The turn and, with `reading.backfill`, the thread's earlier messages, read at
        once. Only then gathered: a gather runs each part as a task of its own, and each
        costs the ack a turn of the event loop, behind whatever else the loop has to do."""
        turn = self.turn(inbound, bot_user_id, deadline, reading.files, redactions)
        if not reading.backfill:
            return await turn, ()
        return await asyncio.gather(
            turn, self._backfill(inbound, bot_user_id, deadline, reading.files, redactions)
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
        files: FileReader | None,
        redactions: Redactions,
    ) -> Sequence[EarlierMessage]:
        """The thread's messages before this one, rendered as turns with ids from their ts."""
        if self._threads is None or not inbound.thread_ts:
            return ()
        found = await self._threads.messages(
            inbound.channel, inbound.thread_ts, limit=self._backfill_messages + 1, deadline=deadline
        )
        before = [m for m in found if _ts_key(m.ts) < _ts_key(inbound.ts)]
        before = before[-self._backfill_messages :]
        users = {m.user for m in before} | {u for m in before for u in mentioned_user_ids(m.text)}
        names, contents = await asyncio.gather(
            self._names(sorted(users), deadline),
            asyncio.gather(*(_read_files(files, m.files, deadline) for m in before)),
        )
        shared = inbound.ext_shared is not False
        return tuple(
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
            )
            for m, read in zip(before, contents, strict=True)
        )

    async def _names(self, user_ids: list[str], deadline: float | None) -> dict[str, str]:
        try:
            async with asyncio.timeout_at(deadline):
                return await self._users.names(user_ids)
        except TimeoutError:
            return {}  # the ids stand in: a name is decoration, the id is the identity


def earlier_message_id(team: str, channel: str, ts: str) -> str:
    """The stored id of a back-filled message (one that has no task of its own)."""
    return f"slack:{team}:{channel}:{ts}"


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
