"""Reading a Slack thread: back-fill for the gatekeeper, and `read_thread` for the agent.

When the bot is first mentioned inside an existing thread, the earlier messages of that
thread become the start of the conversation ("summarize this thread" must work), so the
gatekeeper asks for them here. The agent's `read_thread` tool reads the same way through
the `agent.ThreadReader` port. Both render every person's message the way the gatekeeper
renders a typed one (`render_message`): in a `<turn>` tag with the author's id, the
channel and the time, so nothing a person wrote can pass for someone else's words.
Reads are bounded in count and time; a failure to read (any of `gateway.slack.errors`'
outcomes, which the client raises) is never a failure to answer. Each page is paced
(gateway/slack/read_pacing.py: a budget per workspace and method, shared by every replica)
and the pages are read one after another; a read that stops short (`ThreadRead.stopped`:
deferred, rate_limited, failed) says how much it did not read when Slack said how many the
thread holds (`unread_count`), for the model to be told (gateway/inbound/context.py;
`read_thread`'s last line).

`render_message` is also where a pasted credential leaves what people wrote
(`gateway.text.secrets`): every turn, back-filled message, thread read and file text the
model or the database ever sees is rendered here first. In a Slack Connect channel that
is answered, a message whose author's team is not the installation's says so
(`org="external"`), for thread reads too (the task's address records the channel's sharing).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from agent import Task, sanitize_text
from gateway.slack.address import SHARED, SlackAddress
from gateway.slack.codes import Meaning
from gateway.slack.errors import SlackError, SlackRefused
from gateway.slack.events import ANSWERED_SUBTYPES, MalformedEvent, SharedFile, shared_files
from gateway.slack.read_pacing import FULL_PAGE, ReadOutcome, ReadPacing
from gateway.slack.users import NameDirectory
from gateway.text.markup import mentioned_user_ids, slack_to_text
from gateway.text.provenance import Turn, escape_body, render_turn
from gateway.text.secrets import Redactions

log = logging.getLogger(__name__)

_SLACK_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")


@dataclass(frozen=True, slots=True)
class ThreadMessage:
    """A person's message in a thread, as Slack returned it."""

    user: str
    text: str
    ts: str
    files: tuple[SharedFile, ...] = ()  # read by the gatekeeper's back-fill
    team: str | None = None  # its author's workspace (in a Slack Connect channel, maybe not ours)


@dataclass(frozen=True, slots=True)
class ThreadRead:
    """What a read of a thread (or of a channel's top level) brought: people's messages,
    oldest first; whether every page was read (`complete`); how many messages Slack said
    the thread holds (`total`, its root's `reply_count` and the root; None: not said) and
    how many of any kind were read (`seen`, bots' included, to count against `total`);
    and why a read stopped short (`stopped`: None when it did not)."""

    messages: list[ThreadMessage]
    complete: bool = True
    total: int | None = None
    seen: int = 0
    stopped: ReadOutcome | None = None

    @property
    def newest(self) -> str | None:
        return self.messages[-1].ts if self.messages else None


class SlackThreads:
    """Reads of one workspace's threads and channels, each page paced (`pacing`; None:
    not paced, for tests of the reads themselves)."""

    def __init__(
        self, client: AsyncWebClient, users: NameDirectory, pacing: ReadPacing | None = None
    ) -> None:
        self._client = client
        self._users = users
        self._pacing = pacing

    async def messages(
        self,
        channel: str,
        thread_ts: str,
        *,
        limit: int,
        deadline: float | None = None,
        team: str = "",
    ) -> list[ThreadMessage]:
        """People's messages in the thread, oldest first: at most the latest `limit`. At
        `deadline` (event-loop time) the pages read so far are what there is."""
        return (
            await self.read(channel, thread_ts, team=team, limit=limit, deadline=deadline)
        ).messages

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
        """The thread (or with no `thread_ts`, the channel's latest top-level messages)
        after `oldest` and before `latest` when given, page after page, each paced: at most
        the latest `limit` people's messages, oldest first, and whether that is all."""
        page = _Pages(channel, thread_ts, team, oldest, latest)
        try:
            while True:
                if not await self._take(page, deadline):
                    return page.stopped("deferred", limit)
                async with asyncio.timeout_at(deadline):
                    body = await self._page(page, limit)
                await self._counted(page, body, limit)
                if not page.cursor or (not thread_ts and len(page.collected) >= limit):
                    return page.done(limit)
        except SlackRefused as failure:
            if failure.meaning is not Meaning.RATE_LIMITED and failure.response.status_code != 429:
                return self._failed(page, failure, limit)
            log.warning("%s failed for %s/%s: ratelimited", page.method, channel, thread_ts)
            if self._pacing is not None:
                await self._pacing.ratelimited(team, page.method, failure.retry_after)
            return page.stopped("rate_limited", limit)
        except SlackError as failure:
            return self._failed(page, failure, limit)
        except TimeoutError:
            log.warning("%s cut by the time budget for %s/%s", page.method, channel, thread_ts)
            return page.stopped("deferred", limit)

    def _failed(self, page: _Pages, failure: SlackError, limit: int) -> ThreadRead:
        log.warning(
            "%s failed for %s/%s: %s", page.method, page.channel, page.thread_ts, failure.reason
        )
        if self._pacing is not None:
            self._pacing.on_read(page.method, "failed")
        return page.stopped("failed", limit)

    async def _take(self, page: _Pages, deadline: float | None) -> bool:
        """The page's call, from the shared budget (waiting until `deadline` at most)."""
        if self._pacing is None:
            return True
        page.size = await self._pacing.page_size(page.team)
        return await self._pacing.take(page.team, page.method, deadline)

    async def _counted(self, page: _Pages, body: Any, limit: int) -> None:
        asked = page.asked(limit)
        got = page.add(body)
        if self._pacing is not None:
            await self._pacing.page_read(
                page.team, page.method, asked=asked, got=got, has_more=bool(page.cursor)
            )

    async def _page(self, page: _Pages, limit: int) -> Any:
        """A page of the thread; with no thread (a schedule's run, a top-level mention's
        channel context), a page of the channel's latest messages, newest first as Slack
        gives them."""
        if not page.thread_ts:
            return await self._client.conversations_history(
                channel=page.channel,
                limit=page.asked(limit),
                cursor=page.cursor,
                oldest=page.oldest,
                latest=page.latest,
            )
        return await self._client.conversations_replies(
            channel=page.channel,
            ts=page.thread_ts,
            limit=page.asked(limit),
            cursor=page.cursor,
            oldest=page.oldest,
            latest=page.latest,
        )

    async def read_thread(self, task: Task, *, limit: int) -> Sequence[str]:
        """`agent.ThreadReader`: the task's thread, each message in its `<turn>` tag, and
        a last line saying so when Slack's read limit kept some from being read.

        Not `Name: text` lines: a newline in one message would read as another speaker."""
        channel = task.address["channel"]
        address = SlackAddress.parse(task.address)
        read = await self.read(
            channel, task.address["thread_ts"], team=address.team or "", limit=limit
        )
        found = read.messages
        names = await self._users.names(
            sorted({m.user for m in found} | {u for m in found for u in mentioned_user_ids(m.text)})
        )
        tenant = (address.team, address.enterprise)
        turns = [
            render_message(m, channel, names, external=address.shared and foreign(m.team, *tenant))
            for m in found
        ]
        return [*turns, gap_line(read)] if read.stopped else turns


def gap_line(read: ThreadRead) -> str:
    """What a read stopped short says of what it did not read."""
    missing = unread_count(read)
    why = "Slack's read limit" if read.stopped != "failed" else "Slack did not answer"
    if missing:
        return f"({missing} more messages of this thread were not read: {why}.)"
    return f"(Some messages of this thread were not read: {why}.)"


def unread_count(read: ThreadRead, *, later: int = 0) -> int | None:
    """How many messages of the thread a read did not see, by what Slack said the thread
    holds (None: it did not say); `later` of them are known to be after what was asked."""
    if read.total is None:
        return None
    return max(0, read.total - read.seen - later)


class _Pages:
    """Where a paged read stands: its method, cursor, what it collected and counted."""

    def __init__(
        self, channel: str, thread_ts: str, team: str, oldest: str | None, latest: str | None
    ) -> None:
        self.channel, self.thread_ts, self.team = channel, thread_ts, team
        self.oldest, self.latest = oldest, latest
        self.method = "conversations.replies" if thread_ts else "conversations.history"
        self.cursor: str | None = None
        self.collected: list[ThreadMessage] = []
        self.seen = 0
        self.total: int | None = None
        self.size = FULL_PAGE  # the tier's page size (gateway/slack/read_pacing.py)

    def asked(self, limit: int) -> int:
        return self.size if self.thread_ts else min(limit, self.size)

    def add(self, body: Any) -> int:
        """The page's messages collected; how many it held (of any kind)."""
        raw = body.get("messages") or []
        for message in raw:
            if message.get("ts") == self.thread_ts and isinstance(message.get("reply_count"), int):
                self.total = int(message["reply_count"]) + 1
        self.seen += len(raw)
        self.collected.extend(m for m in map(_person_message, raw) if m)
        self.cursor = (body.get("response_metadata") or {}).get("next_cursor") or None
        return len(raw)

    def done(self, limit: int) -> ThreadRead:
        return self._read(limit, complete=True, stopped=None)

    def stopped(self, why: ReadOutcome, limit: int) -> ThreadRead:
        return self._read(limit, complete=False, stopped=why)

    def _read(self, limit: int, *, complete: bool, stopped: ReadOutcome | None) -> ThreadRead:
        found = _oldest_first(self.collected, self.thread_ts)[-limit:] if limit else []
        return ThreadRead(found, complete, self.total, self.seen, stopped)


def render_message(
    message: ThreadMessage,
    channel: str,
    names: Mapping[str, str],
    *,
    bot_user_id: str | None = None,
    note: str = "",
    edited: datetime | None = None,
    external: bool = False,
    redactions: Redactions | None = None,
) -> str:
    """A person's message as the model reads it: Slack markup as plain text, in a turn tag
    with the author's id, the channel and the time (the bot's own mention dropped), and
    `note` (what the gateway knows of attached files) after the text, inside the same tag.
    Credentials in the text and the note are redacted, counted in `redactions` if given;
    `external` marks an author of another organization."""
    tally = redactions if redactions is not None else Redactions()
    # Sanitized first: an invisible character inside a token would hide it from the shapes,
    # and the tag removes it afterwards.
    body = tally.redact(
        sanitize_text(slack_to_text(message.text, user_names=names, bot_user_id=bot_user_id))
    )
    note = tally.redact(sanitize_text(note))
    body = f"{body}\n\n{note}" if body and note else body or note
    author = names.get(message.user, message.user)
    org = EXTERNAL if external else None
    return render_turn(
        Turn(author, message.user, channel, slack_time(message.ts), body, edited, org)
    )


def rendered_note_part(part: str) -> str:
    """A part of a message's `note` (a file's text block) exactly as `render_message` writes
    it into the turn: sanitized, its credentials redacted and escaped, the same steps in
    the same order, so the rendered turn contains it (`agent.Document.in_turn`)."""
    return escape_body(Redactions().redact(sanitize_text(part)))


# How a turn says "another organization" (and a task's address, `SlackAddress.shared`).
EXTERNAL = SHARED


def foreign(author_team: str | None, team: str | None, enterprise: str | None = None) -> bool:
    """Whether an author of `author_team` is of another organization than the installation
    (`team`, and `enterprise` on Enterprise Grid). An unknown team counts as foreign: in a
    channel shared with another organization, not knowing is not trusting."""
    return author_team is None or author_team not in {team, enterprise}


def _oldest_first(messages: list[ThreadMessage], thread_ts: str) -> list[ThreadMessage]:
    """A thread comes oldest first; a channel's history newest first, so it is turned."""
    return messages if thread_ts else messages[::-1]


def slack_time(ts: str) -> datetime:
    """A Slack message ts ("1700000000.000100") as an aware UTC datetime."""
    try:
        return datetime.fromtimestamp(float(ts), UTC)
    except (ValueError, OverflowError, OSError) as exc:
        raise MalformedEvent(f"not a Slack timestamp: {ts[:40]!r}") from exc


def _person_message(message: Mapping[str, Any]) -> ThreadMessage | None:
    subtype = message.get("subtype")
    if subtype and not (isinstance(subtype, str) and subtype in ANSWERED_SUBTYPES):
        return None  # joins, bot messages and the other system subtypes
    if message.get("bot_id") or not message.get("user"):
        return None
    ts = str(message.get("ts"))
    if not _SLACK_TS.fullmatch(ts):
        return None  # not a message we could place in time, nor order against others
    text = str(message.get("text") or "")
    team = next((t for k in ("user_team", "team") if isinstance(t := message.get(k), str)), None)
    return ThreadMessage(str(message["user"]), text, ts, shared_files(message.get("files")), team)
