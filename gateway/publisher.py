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

The search reads only messages of our own bot user, posted since the row was first
claimed, and retries reads that fail transiently (429, 5xx, a cut connection) within a
time limit. Then it settles on one outcome: a thread it cannot read (`missing_scope` — a
group DM without `mpim:history` —, `not_in_channel`, …), or not within the limit, counts
the post as delivered, unverified, and says so in the log. The call that may have posted
it reached Slack; posting again would show it twice, and a failure notice would follow
a reply that may well be there.

Every claim is fenced by the task's lease (storage/outbox.py): a worker whose task was
taken over gets `Superseded` and posts nothing.

Every post says `parse="none"` and `link_names=False`: nothing in it is turned into a
mention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
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
# Slack's own words for "failed, but some of it may have happened" (and for a read, "ask
# again later"), besides 5xx answers.
_MAYBE_DONE = frozenset({"internal_error", "fatal_error", "service_unavailable"})
_TRANSIENT = _MAYBE_DONE | {"ratelimited", "request_timeout"}
# A post whose outcome stays unknown is called again at most this often per publish; then
# the task is retried later (and the next attempt goes on from the outbox row).
_CALLS_PER_POST = 3
_CLOCK_SKEW_SECONDS = 60.0


class SlackPublisher:
    """`agent.Publisher` on Slack."""

    def __init__(
        self,
        client: AsyncWebClient,
        outbox: Outbox,
        *,
        bot_user_id: str | None = None,
        bot_id: str | None = None,
        status: str = "is thinking…",
        status_refresh_seconds: float = 90.0,
        reconcile_seconds: float = 60.0,
    ) -> None:
        self._client = client
        self._outbox = outbox
        self._bot_user_id = bot_user_id
        self._bot_id = bot_id
        self._status = status
        self._refresh_seconds = status_refresh_seconds
        self._reconcile_seconds = reconcile_seconds

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
                found = await self.find_post(task.address, post_id, since=claim.since)
                if found is not None:
                    await self._outbox.mark_sent(post_id, found.ts)
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
                    # Explicit, not Slack's defaults: with `parse=full` or `link_names` Slack
                    # would turn a bare `@here` or `@name` in the text into a ping.
                    parse="none",
                    link_names=False,
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

    async def find_post(
        self, address: Mapping[str, str], post_id: str, *, since: datetime | None = None
    ) -> Found | None:
        """Our post carrying `post_id` in the thread (None: not there). Reads failing
        transiently are retried within `reconcile_seconds`; a thread that cannot be read,
        or not in time, gives `Found(None)`: counted as delivered, unverified."""
        pause = 1.0
        try:
            async with asyncio.timeout(self._reconcile_seconds):
                while True:
                    try:
                        ts = await self._search(address, post_id, since)
                        return None if ts is None else Found(ts)
                    except SlackApiError as exc:
                        if not _transient(exc):
                            return _unverified(address, post_id, _why(exc))
                        reason = _why(exc)
                    except (aiohttp.ClientError, OSError) as exc:
                        reason = type(exc).__name__
                    log.info("reading the thread for %s failed (%s); trying again", post_id, reason)
                    await asyncio.sleep(pause)  # a pause between reads, bounded by the limit
                    pause = min(pause * 2, 10.0)
        except TimeoutError:
            return _unverified(address, post_id, f"unreadable for {self._reconcile_seconds:g}s")

    async def _search(
        self, address: Mapping[str, str], post_id: str, since: datetime | None
    ) -> str | None:
        # Slack's clock and the database's may differ a little: start a bit earlier.
        oldest = None if since is None else f"{since.timestamp() - _CLOCK_SKEW_SECONDS:.6f}"
        cursor = None
        while True:
            try:
                page = await self._client.conversations_replies(
                    channel=address["channel"],
                    ts=address["thread_ts"],
                    oldest=oldest,
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor,
                )
            except SlackApiError as exc:
                if exc.response.get("error") in _NOTHING_THERE:
                    return None  # no thread yet, so our post cannot be in it
                raise
            for message in page.get("messages") or []:
                if self._is_ours(message) and _outbox_id(message) == post_id:
                    return str(message.get("ts"))
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                return None

    def _is_ours(self, message: Mapping[str, Any]) -> bool:
        """Posted by our bot user (anyone could copy our metadata into a message)."""
        if self._bot_user_id is None and self._bot_id is None:
            return True  # not told who we are: the metadata alone decides
        return (self._bot_user_id is not None and message.get("user") == self._bot_user_id) or (
            self._bot_id is not None and message.get("bot_id") == self._bot_id
        )


@dataclass(frozen=True, slots=True)
class Found:
    """A post found in its thread: its `ts`, or None when it is counted as delivered
    without having been seen (the thread could not be read)."""

    ts: str | None


class PostNotSettled(Exception):
    """Every call for a post went unanswered, and the thread did not show it."""


def _unverified(address: Mapping[str, str], post_id: str, why: str) -> Found:
    log.warning(
        "cannot read thread %s/%s to settle post %s (%s): counted as delivered, unverified",
        address["channel"],
        address["thread_ts"],
        post_id,
        why,
    )
    return Found(None)


def _why(exc: SlackApiError) -> str:
    error = exc.response.get("error") if isinstance(exc.response.data, dict) else None
    return str(error or f"HTTP {exc.response.status_code}")


def _may_have_happened(exc: SlackApiError) -> bool:
    """Whether a write Slack answered with `exc` may still have been done."""
    return exc.response.status_code >= 500 or exc.response.get("error") in _MAYBE_DONE


def _transient(exc: SlackApiError) -> bool:
    """Whether a read answered with `exc` may succeed if asked again."""
    status = exc.response.status_code
    return status == 429 or status >= 500 or exc.response.get("error") in _TRANSIENT


def _outbox_id(message: Mapping[str, Any]) -> str | None:
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != METADATA_EVENT:
        return None
    payload = metadata.get("event_payload") or {}
    value = payload.get("outbox_id")
    return value if isinstance(value, str) else None
