"""Posting the agent's messages into their Slack thread, each exactly once.

Every post goes through an outbox row keyed by its message id (a long reply is several
posts: `id`, `id#1`, `id#2`, …) and carries Slack message metadata naming that id. When
an earlier attempt's outcome is unknown — the process died after sending, or the response
was lost — the thread is searched for the id before anything is posted again. Every post
says `parse="none"` and `link_names=False`: nothing in it is turned into a mention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from agent import Task, stop_task
from gateway.rendering import SlackMessage, render_reply
from storage import Outbox

log = logging.getLogger(__name__)

METADATA_EVENT = "threadgate_post"
_NOTHING_THERE = frozenset({"thread_not_found", "message_not_found"})


class SlackPublisher:
    """`agent.Publisher` on Slack."""

    def __init__(
        self,
        client: AsyncWebClient,
        outbox: Outbox,
        *,
        status: str = "is thinking…",
        status_refresh_seconds: float = 90.0,
    ) -> None:
        self._client = client
        self._outbox = outbox
        self._status = status
        self._refresh_seconds = status_refresh_seconds

    async def publish(self, task: Task, message_id: str, text: str) -> None:
        for n, part in enumerate(render_reply(text)):
            await self._post_once(task.address, message_id if n == 0 else f"{message_id}#{n}", part)

    @contextlib.asynccontextmanager
    async def working(self, task: Task) -> AsyncIterator[None]:
        """ "is thinking…" in the thread, refreshed before Slack's two-minute expiry, then
        cleared (Slack also clears it when we post)."""
        refresher = asyncio.create_task(self._keep_status(task), name=f"status-{task.id}")
        try:
            yield
        finally:
            await stop_task(refresher)
            await self._set_status(task, "")

    async def _keep_status(self, task: Task) -> None:
        while True:
            await self._set_status(task, self._status)
            await asyncio.sleep(self._refresh_seconds)

    async def _set_status(self, task: Task, status: str) -> None:
        try:
            await self._client.assistant_threads_setStatus(
                channel_id=task.address["channel"],
                thread_ts=task.address["thread_ts"],
                status=status,
            )
        except (SlackApiError, SlackClientError, OSError) as exc:
            # Status exists only in assistant threads; elsewhere Slack refuses it. Harmless.
            log.debug("setStatus refused: %s", exc)

    async def _post_once(
        self, address: Mapping[str, str], post_id: str, message: SlackMessage
    ) -> None:
        claim = await self._outbox.claim(post_id)
        if claim == "sent":
            return
        if claim == "unknown":
            found = await self.find_post(address, post_id)
            if found is not None:
                await self._outbox.mark_sent(post_id, found)
                return
        response = await self._client.chat_postMessage(
            channel=address["channel"],
            thread_ts=address["thread_ts"],
            text=message.text,
            blocks=list(message.blocks),
            metadata={"event_type": METADATA_EVENT, "event_payload": {"outbox_id": post_id}},
            unfurl_links=False,
            unfurl_media=False,
            # Explicit, not Slack's defaults: with `parse=full` or `link_names` Slack would
            # turn a bare `@here` or `@name` in the text into a ping.
            parse="none",
            link_names=False,
        )
        await self._outbox.mark_sent(post_id, response.get("ts"))

    async def find_post(self, address: Mapping[str, str], post_id: str) -> str | None:
        """The ts of our post carrying `post_id` in the thread, if it is there."""
        cursor = None
        while True:
            try:
                page = await self._client.conversations_replies(
                    channel=address["channel"],
                    ts=address["thread_ts"],
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor,
                )
            except SlackApiError as exc:
                if exc.response.get("error") in _NOTHING_THERE:
                    return None  # no thread yet, so our post cannot be in it
                raise
            for message in page.get("messages") or []:
                if _outbox_id(message) == post_id:
                    return str(message.get("ts"))
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                return None


def _outbox_id(message: Mapping[str, Any]) -> str | None:
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != METADATA_EVENT:
        return None
    payload = metadata.get("event_payload") or {}
    value = payload.get("outbox_id")
    return value if isinstance(value, str) else None
