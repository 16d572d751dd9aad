"""Looking for a post in its thread, to settle a call whose outcome is unknown.

A post's call to Slack may have landed without our hearing of it (a 5xx, a cut
connection, no answer in time, the process dying mid-call). The outbox (storage/outbox.py)
then answers "unknown", and before the post may be sent again the thread is searched for
it: every post carries Slack message metadata naming its outbox id (`post_metadata`).

The search reads only messages of our own bot user (anyone could copy our metadata into
a message), posted since the row was first claimed, and retries reads that fail
transiently (Slack out of reach or not answering, `ratelimited`) within a time limit.
It ends in one of the outbox's settlements (storage/outbox_states.py): "found"; "orphan",
a stream some attempt started for the post whose ts was never recorded (our message
without our metadata, which no outbox row accounts for); "absent"; or "unverified": a
thread it cannot read (`missing_scope` — a group DM without `mpim:history` —,
`not_in_channel`, …), or not within the limit. An unverified post counts as delivered,
and the log says so: the call that may have posted it reached Slack; posting again would
show it twice, and a failure notice would follow a reply that may well be there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from gateway.slack.address import SlackAddress
from gateway.slack.errors import SlackError, SlackRefused, worth_rereading
from gateway.slack.workspaces import SlackClients
from storage import Outbox, Settlement, StoredInstallation

log = logging.getLogger(__name__)

METADATA_EVENT = "threadgate_post"
# Slack's answers for a thread or message that is not there.
NOTHING_THERE = frozenset({"thread_not_found", "message_not_found"})
_CLOCK_SKEW_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Found:
    """How a search of the thread for a post ended (storage/outbox_states.py): "found"
    at `ts`; "orphan": not the post itself but a stream some attempt started for it and
    never completed, at `ts`; "unverified": counted as delivered without having been seen
    (the thread could not be read); "absent": not there."""

    outcome: Settlement
    ts: str | None = None


class ThreadSearch:
    """Finds our posts in their threads (module docstring). `orphans`: whether a message
    of ours without metadata may be a stream of a post (only with streaming on);
    `bot_user_id` and `bot_id` say who we are in the one-workspace setup (each
    installation says it with many)."""

    def __init__(
        self,
        clients: SlackClients,
        outbox: Outbox,
        *,
        bot_user_id: str | None,
        bot_id: str | None,
        reconcile_seconds: float,
        orphans: bool,
    ) -> None:
        self._clients = clients
        self._outbox = outbox
        self._bot_user_id = bot_user_id
        self._bot_id = bot_id
        self._reconcile_seconds = reconcile_seconds
        self._orphans = orphans

    async def find_post(
        self, address: SlackAddress, post_id: str, *, since: datetime | None = None
    ) -> Found:
        """How looking for our post carrying `post_id` in the thread ends (`Found`). Reads
        failing transiently are retried within `reconcile_seconds`; a thread that cannot be
        read, or not in time, is "unverified": the post is counted as delivered."""
        pause = 1.0
        try:
            async with asyncio.timeout(self._reconcile_seconds):
                while True:
                    try:
                        return await self._search(address, post_id, since)
                    except SlackError as exc:
                        if not worth_rereading(exc):
                            return _unverified(address, post_id, exc.reason)
                        reason = exc.reason
                        asked = exc.retry_after if isinstance(exc, SlackRefused) else None
                    log.info("reading the thread for %s failed (%s); trying again", post_id, reason)
                    # Slack's Retry-After when it said one (the reads are not retried by
                    # the client: gateway/slack/client.py), else a doubling pause; either
                    # bounded by the limit.
                    await asyncio.sleep(asked if asked is not None else pause)
                    pause = pause if asked is not None else min(pause * 2, 10.0)
        except TimeoutError:
            return _unverified(address, post_id, f"unreadable for {self._reconcile_seconds:g}s")

    async def _search(self, address: SlackAddress, post_id: str, since: datetime | None) -> Found:
        """Our post carrying `post_id`; failing that, an orphaned stream (our message
        without our metadata, which no outbox row accounts for), the earliest first."""
        # Slack's clock and the database's may differ a little: start a bit earlier.
        oldest = None if since is None else f"{since.timestamp() - _CLOCK_SKEW_SECONDS:.6f}"
        cursor = None
        unmarked: list[str] = []
        workspace = await self._clients.workspace(address.team, address.enterprise)
        while True:
            try:
                page = await _read(workspace.client, address, oldest, cursor)
            except SlackRefused as exc:
                if exc.error in NOTHING_THERE:
                    return Found("absent")  # no thread yet, so our post cannot be in it
                raise
            for message in page.get("messages") or []:
                if not self._is_ours(message, workspace.installation):
                    continue
                if _outbox_id(message) == post_id:
                    return Found("found", str(message.get("ts")))
                if self._orphans and _unmarked(message, address):
                    unmarked.append(str(message.get("ts")))
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
        if since is None or not unmarked:
            return Found("absent")  # without a bound, any old message of ours could pass
        known = await self._outbox.known_refs(unmarked)
        orphans = sorted((ts for ts in unmarked if ts not in known), key=float)
        return Found("orphan", orphans[0]) if orphans else Found("absent")

    def _is_ours(self, message: Mapping[str, Any], found: StoredInstallation | None = None) -> bool:
        """Posted by our bot user (anyone could copy our metadata into a message); with many
        workspaces, the bot user of the thread's workspace's installation (`found`)."""
        bot_user_id, bot_id = (
            (found.bot_user_id, found.bot_id) if found else (self._bot_user_id, self._bot_id)
        )
        if bot_user_id is None and bot_id is None:
            return True  # not told who we are: the metadata alone decides
        return (bot_user_id is not None and message.get("user") == bot_user_id) or (
            bot_id is not None and message.get("bot_id") == bot_id
        )


async def _read(
    client: AsyncWebClient, address: SlackAddress, oldest: str | None, cursor: str | None
) -> Any:
    """One page of the thread; of the channel's top for a post made there (a schedule's)."""
    if address.top_level:
        return await client.conversations_history(
            channel=address.channel,
            oldest=oldest,
            include_all_metadata=True,
            limit=200,
            cursor=cursor,
        )
    return await client.conversations_replies(
        channel=address.channel,
        ts=address.thread_ts,
        oldest=oldest,
        include_all_metadata=True,
        limit=200,
        cursor=cursor,
    )


def post_metadata(post_id: str) -> dict[str, Any]:
    """The Slack message metadata that names a post's outbox id."""
    return {"event_type": METADATA_EVENT, "event_payload": {"outbox_id": post_id}}


def _unverified(address: SlackAddress, post_id: str, why: str) -> Found:
    log.warning(
        "cannot read thread %s/%s to settle post %s (%s): counted as delivered, unverified",
        address.channel,
        address.thread_ts,
        post_id,
        why,
    )
    return Found("unverified")


def _unmarked(message: Mapping[str, Any], address: SlackAddress) -> bool:
    """A message of ours in the thread without our metadata: what a stream shows before
    `stopStream` puts the metadata on (the thread's own root is not one)."""
    return not message.get("metadata") and message.get("ts") != address.thread_ts


def _outbox_id(message: Mapping[str, Any]) -> str | None:
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != METADATA_EVENT:
        return None
    payload = metadata.get("event_payload") or {}
    value = payload.get("outbox_id")
    return value if isinstance(value, str) else None
