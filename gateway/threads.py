"""Reading a Slack thread: back-fill for the gatekeeper, and `read_thread` for the agent.

When the bot is first mentioned inside an existing thread, the earlier messages of that
thread become the start of the conversation ("summarize this thread" must work), so the
gatekeeper asks for them here. The agent's `read_thread` tool reads the same way through
the `agent.ThreadReader` port. Reads are bounded in count and time; a failure to
read is never a failure to answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from agent import Task
from gateway.markup import slack_to_text
from gateway.users import NameDirectory

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ThreadMessage:
    """A person's message in a thread, as Slack returned it."""

    user: str
    text: str
    ts: str


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
                    page = await self._client.conversations_replies(
                        channel=channel, ts=thread_ts, limit=200, cursor=cursor
                    )
                collected.extend(m for m in map(_person_message, page.get("messages") or []) if m)
                cursor = (page.get("response_metadata") or {}).get("next_cursor")
                if not cursor:
                    return collected[-limit:]
        except (SlackApiError, SlackClientError, OSError) as exc:
            log.warning("conversations.replies failed for %s/%s: %s", channel, thread_ts, exc)
            return collected[-limit:]
        except TimeoutError:
            log.warning(
                "conversations.replies cut by the time budget for %s/%s", channel, thread_ts
            )
            return collected[-limit:]

    async def read_thread(self, task: Task, *, limit: int) -> Sequence[str]:
        """`agent.ThreadReader`: the task's thread as `Name: text` lines."""
        address = task.address
        found = await self.messages(address["channel"], address["thread_ts"], limit=limit)
        names = await self._users.names(sorted({m.user for m in found}))
        return [
            f"{names.get(m.user, m.user)}: {slack_to_text(m.text, user_names=names)}" for m in found
        ]


def _person_message(message: Mapping[str, Any]) -> ThreadMessage | None:
    if message.get("subtype") or message.get("bot_id") or not message.get("user"):
        return None
    return ThreadMessage(
        str(message["user"]), str(message.get("text") or ""), str(message.get("ts"))
    )
