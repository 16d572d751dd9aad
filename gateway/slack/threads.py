"""Reading a Slack thread: back-fill for the gatekeeper, and `read_thread` for the agent.

When the bot is first mentioned inside an existing thread, the earlier messages of that
thread become the start of the conversation ("summarize this thread" must work), so the
gatekeeper asks for them here. The agent's `read_thread` tool reads the same way through
the `agent.ThreadReader` port. Both render every person's message the way the gatekeeper
renders a typed one (`render_message`): in a `<turn>` tag with the author's id, the
channel and the time, so nothing a person wrote can pass for someone else's words.
Reads are bounded in count and time; a failure to read (any of `gateway.slack.errors`'
outcomes, which the client raises) is never a failure to answer.

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
from gateway.slack.errors import SlackError
from gateway.slack.events import ANSWERED_SUBTYPES, MalformedEvent, SharedFile, shared_files
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


class SlackThreads:
    def __init__(self, client: AsyncWebClient, users: NameDirectory) -> None:
        self._client = client
        self._users = users

    async def messages(
        self, channel: str, thread_ts: str, *, limit: int, deadline: float | None = None
    ) -> list[ThreadMessage]:
        """People's messages in the thread, oldest first: at most the latest `limit`. At
        `deadline` (event-loop time) the pages read so far are what there is."""
        collected: list[ThreadMessage] = []
        cursor = None
        try:
            while True:
                async with asyncio.timeout_at(deadline):
                    page = await self._page(channel, thread_ts, cursor, limit)
                collected.extend(m for m in map(_person_message, page.get("messages") or []) if m)
                cursor = (page.get("response_metadata") or {}).get("next_cursor")
                if not cursor or (not thread_ts and len(collected) >= limit):
                    return _oldest_first(collected, thread_ts)[-limit:]
        except SlackError as failure:
            log.warning(
                "conversations.replies failed for %s/%s: %s", channel, thread_ts, failure.reason
            )
            return _oldest_first(collected, thread_ts)[-limit:]
        except TimeoutError:
            log.warning(
                "conversations.replies cut by the time budget for %s/%s", channel, thread_ts
            )
            return _oldest_first(collected, thread_ts)[-limit:]

    async def _page(self, channel: str, thread_ts: str, cursor: str | None, limit: int) -> Any:
        """A page of the thread; with no thread (a schedule's run at the top of a channel),
        a page of the channel's latest messages, newest first as Slack gives them."""
        if not thread_ts:
            return await self._client.conversations_history(
                channel=channel, limit=min(limit, 200), cursor=cursor
            )
        return await self._client.conversations_replies(
            channel=channel, ts=thread_ts, limit=200, cursor=cursor
        )

    async def read_thread(self, task: Task, *, limit: int) -> Sequence[str]:
        """`agent.ThreadReader`: the task's thread, each message in its `<turn>` tag.

        Not `Name: text` lines: a newline in one message would read as another speaker."""
        channel = task.address["channel"]
        found = await self.messages(channel, task.address["thread_ts"], limit=limit)
        names = await self._users.names(
            sorted({m.user for m in found} | {u for m in found for u in mentioned_user_ids(m.text)})
        )
        address = SlackAddress.parse(task.address)
        tenant = (address.team, address.enterprise)
        return [
            render_message(m, channel, names, external=address.shared and foreign(m.team, *tenant))
            for m in found
        ]


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
