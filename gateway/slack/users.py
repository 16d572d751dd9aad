"""Display names for user ids, from `users.info`, cached.

A name is only decoration for the provenance tag; the id is the identity. So a failed
lookup never stops a message: the id stands in for the name. Slack's refusal (no such
user, a missing scope) is remembered for a while; any other failure is not, so the next
message tries again. The client raises `gateway.slack.errors`' outcomes (a
`MeteredWebClient`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from slack_sdk.web.async_client import AsyncWebClient

from gateway.slack.errors import SlackError, SlackRefused

log = logging.getLogger(__name__)


class NameDirectory(Protocol):
    """Display names by user id (Slack's `users.info`, or a fixed name in the console)."""

    async def names(self, user_ids: list[str]) -> dict[str, str]: ...


class UserDirectory:
    def __init__(
        self,
        client: AsyncWebClient,
        *,
        ttl_seconds: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._ttl = ttl_seconds
        self._clock = clock
        self._names: dict[str, tuple[str, float]] = {}

    def cached(self, user_id: str) -> str | None:
        """The name known for `user_id` and still fresh, or None."""
        cached = self._names.get(user_id)
        if cached is not None and cached[1] > self._clock():
            return cached[0]
        return None

    async def name(self, user_id: str) -> str:
        cached = self.cached(user_id)
        if cached is not None:
            return cached
        try:
            response = await self._client.users_info(user=user_id)
        except SlackRefused as refused:
            # A definite answer (user_not_found, missing scope): remember it for a while.
            log.warning("users.info refused %s: %s", user_id, refused.error)
            self._names[user_id] = (user_id, self._clock() + self._ttl / 10)
            return user_id
        except SlackError as failure:
            log.warning("users.info failed for %s: %s", user_id, failure.reason)
            return user_id
        name = display_name(response.get("user") or {}) or user_id
        self._names[user_id] = (name, self._clock() + self._ttl)
        return name

    async def names(self, user_ids: list[str]) -> dict[str, str]:
        """Every id's name, the ones not cached looked up at once: a back-filled thread can
        name dozens. Names all cached (the common case, on the way to the ack) are returned
        without suspending: a gather would run each lookup as a task of its own, a turn of
        the event loop each way, behind whatever else the loop has to do."""
        found = {user_id: self.cached(user_id) for user_id in dict.fromkeys(user_ids)}
        missing = [user_id for user_id, name in found.items() if name is None]
        if len(missing) == 1:
            found[missing[0]] = await self.name(missing[0])
        elif missing:
            found.update(zip(missing, await asyncio.gather(*map(self.name, missing)), strict=True))
        return {user_id: name for user_id, name in found.items() if name is not None}


def display_name(user: dict[str, object]) -> str:
    """What Slack shows: display name, else real name, else handle."""
    profile = user.get("profile")
    profile = profile if isinstance(profile, dict) else {}
    for candidate in (
        profile.get("display_name"),
        profile.get("real_name"),
        user.get("real_name"),
        user.get("name"),
    ):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return ""
