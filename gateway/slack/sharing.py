"""Whether a channel is shared with another organization (Slack Connect), failing closed.

An agent in a channel shared with another company answers that company too, with what it
knows and what its tools reach; so such a channel is answered only where the operator
opted in (`externalChannels`, gateway/config/channel_config.py). Slack says it on every
event of such a channel (`is_ext_shared_channel` on the envelope, read by
`gateway.slack.events`); an event that does not say is looked up with
`conversations.info` (scopes `channels:read`, `groups:read`, `im:read`, `mpim:read`):
`is_ext_shared`, or `is_pending_ext_shared` (an invitation out: its messages will be read
by the other side), or `is_shared` without `is_org_shared` (shared, and not only within the
Enterprise Grid organization), is `external`; `is_org_shared` alone is `internal`, and so
is an object whose flags are all false (a direct message's object carries `is_org_shared`
only). An object with none of the four flags says nothing, and is `unknown`.

An answer that cannot be had — Slack refused (`channel_not_found`, `missing_scope`),
failed, was not reached, or not within the pre-ack deadline — is `unknown`, which the
gatekeeper refuses like an external channel: not knowing is not a reason to answer.
A definite answer is cached per channel for `ttl_seconds` (a channel may be shared
later; Slack says so on its next events anyway), at most `max_channels` of them; an
unknown one is not cached, so the next message asks again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

from slack_sdk.web.async_client import AsyncWebClient

from gateway.slack.errors import SlackError

log = logging.getLogger(__name__)

Sharing: TypeAlias = Literal["internal", "external", "unknown"]


class ChannelSharing:
    """`conversations.info`'s answer on sharing, per channel, with one workspace's client."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        ttl_seconds: float = 300.0,
        max_channels: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._ttl = ttl_seconds
        self._max = max_channels
        self._clock = clock
        self._known: OrderedDict[str, tuple[Sharing, float]] = OrderedDict()

    async def sharing(self, channel: str, deadline: float | None = None) -> Sharing:
        """How `channel` is shared; `unknown` when Slack does not say by `deadline`
        (event-loop time)."""
        cached = self._known.get(channel)
        if cached is not None and cached[1] > self._clock():
            return cached[0]
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._client.conversations_info(channel=channel)
        except SlackError as failure:
            log.warning("conversations.info failed for %s: %s", channel, failure.reason)
            return "unknown"
        except TimeoutError:
            log.warning("conversations.info for %s cut by the time budget", channel)
            return "unknown"
        answer = sharing_of(response.get("channel"))
        if answer != "unknown":
            self._remember(channel, answer)
        return answer

    def _remember(self, channel: str, answer: Sharing) -> None:
        self._known[channel] = (answer, self._clock() + self._ttl)
        self._known.move_to_end(channel)
        while len(self._known) > self._max:
            self._known.popitem(last=False)


def sharing_of(channel: Any) -> Sharing:
    """What a conversation object says of its sharing (`unknown` if it is not one, or says
    nothing of it)."""
    if not isinstance(channel, Mapping) or not any(key in channel for key in _FLAGS):
        return "unknown"
    if _flag(channel, "is_ext_shared") or _flag(channel, "is_pending_ext_shared"):
        return "external"
    if _flag(channel, "is_shared") and not _flag(channel, "is_org_shared"):
        return "external"
    return "internal"


_FLAGS = ("is_ext_shared", "is_pending_ext_shared", "is_shared", "is_org_shared")


def _flag(channel: Mapping[str, Any], key: str) -> bool:
    return channel.get(key) is True
