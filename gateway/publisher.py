"""Posting the agent's messages into their Slack thread, each exactly once.

Every post goes through an outbox row keyed by its message id (a long reply is several
posts: `id`, `id#1`, `id#2`, …) and carries Slack message metadata naming that id.

A call to chat.postMessage ends one of three ways: with the post's `ts`; refused outright
(an `ok: false` answer, a 429 after every retry), so nothing landed; or ambiguously — a
5xx, a cut connection, no answer within the time limit, the process dying mid-call.
Slack may have stored an ambiguous post, so it is never simply sent again: once the call
must be over and its post visible (the outbox's `settle_after`: the call's time limit
plus a margin, or the margin after the caller saw it end), the thread is searched for
the id, and only a post that is not there is sent again. The attempt that saw the call
end does this at once; a later attempt that finds the row unfinished does the same.

Every claim is fenced by the task's lease (storage/outbox.py): a worker whose task was
taken over gets `Superseded` and posts nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from agent import Task, stop_task
from gateway.rendering import SlackMessage, render_reply
from storage import Outbox

log = logging.getLogger(__name__)

METADATA_EVENT = "threadgate_post"
_NOTHING_THERE = frozenset({"thread_not_found", "message_not_found"})
# Slack's own words for "failed, but some of it may have happened", besides 5xx answers.
_MAYBE_DONE = frozenset({"internal_error", "fatal_error", "service_unavailable"})
# A post whose outcome stays unknown is called again at most this often per publish; then
# the task is retried later (and the next attempt goes on from the outbox row).
_CALLS_PER_POST = 3


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
            await self._post_once(task, message_id if n == 0 else f"{message_id}#{n}", part)

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

    async def _post_once(self, task: Task, post_id: str, message: SlackMessage) -> None:
        for _ in range(_CALLS_PER_POST):
            claim = await self._outbox.claim(post_id, task.id, task.attempts)
            if claim.state == "sent":
                return
            if claim.state == "unknown":
                # Until the earlier call must be over and its post visible: a search any
                # earlier could miss a post still landing, and post it twice.
                await asyncio.sleep(claim.wait_seconds)
                found = await self.find_post(task.address, post_id)
                if found is not None:
                    await self._outbox.mark_sent(post_id, found)
                    return
                if not await self._outbox.arm(post_id, task.id, task.attempts):
                    return  # an earlier call did land, and its caller said so meanwhile
            if await self._call(task, post_id, message):
                return
        raise PostNotSettled(f"{_CALLS_PER_POST} calls to Slack for {post_id} went unanswered")

    async def _call(self, task: Task, post_id: str, message: SlackMessage) -> bool:
        """One chat.postMessage. True: posted. False: the outcome is unknown (the outbox
        knows the call is over). Raises when Slack refused the post outright."""
        address = task.address
        try:
            # The bound the outbox waits for before anyone looks for this post.
            async with asyncio.timeout(self._outbox.call_seconds):
                response = await self._client.chat_postMessage(
                    channel=address["channel"],
                    thread_ts=address["thread_ts"],
                    text=message.text,
                    blocks=list(message.blocks),
                    metadata={
                        "event_type": METADATA_EVENT,
                        "event_payload": {"outbox_id": post_id},
                    },
                    unfurl_links=False,
                    unfurl_media=False,
                )
        except SlackApiError as exc:
            if not _may_have_happened(exc):
                await self._outbox.call_ended(post_id, task.attempts, posted=False)
                raise
            log.warning("post %s: Slack answered %s; looking in the thread", post_id, _why(exc))
        except (aiohttp.ClientError, OSError) as exc:  # OSError: TimeoutError included
            log.warning("post %s: %s; looking in the thread", post_id, type(exc).__name__)
        else:
            await self._outbox.mark_sent(post_id, response.get("ts"))
            return True
        await self._outbox.call_ended(post_id, task.attempts, posted=None)
        return False

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


class PostNotSettled(Exception):
    """Every call for a post went unanswered, and the thread did not show it."""


def _why(exc: SlackApiError) -> str:
    error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
    return str(error or f"HTTP {exc.response.status_code}")


def _may_have_happened(exc: SlackApiError) -> bool:
    """Whether a write Slack answered with `exc` may still have been done."""
    return exc.response.status_code >= 500 or exc.response.get("error") in _MAYBE_DONE


def _outbox_id(message: Mapping[str, Any]) -> str | None:
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != METADATA_EVENT:
        return None
    payload = metadata.get("event_payload") or {}
    value = payload.get("outbox_id")
    return value if isinstance(value, str) else None
