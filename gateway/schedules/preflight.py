"""The checks before a schedule's run: may it still post, where it posts, for whom it speaks?

A schedule outlives the message that asked for it, and the world moves on: its channel is
archived or deleted, becomes shared with another organization, its owner leaves the
channel or the workspace. Each run is checked with Slack first (`Preflight.check`):

- where it posts: a DM's channel is found once with `conversations.open` (and kept); any
  other conversation is read with `conversations.info` — archived, or not there
  (`channel_not_found`), it cannot run; shared with another organization (Slack Connect,
  `gateway.slack.sharing.sharing_of`) where the channel's policy (`THREADGATE_CHANNEL_CONFIG`,
  `ChannelRules.external`) refuses that, it must not — as a person's message there would
  be refused;
- a person's schedule (it has an owner) speaks for them: `users.info` says whether they
  are still in the workspace (`deleted`), and for one that posts in a channel or its
  thread, `conversations.members` (paged by its cursor, 200 a page as Slack's reference
  recommends) whether they are still in that channel.

Each ends one of three ways: `Runnable` (the channel it posts in), `Unrunnable` (the
scheduler pauses it with the reason, tells the operators and, when it is theirs and they
can still read it, the owner: `tell_owner`), or `Unverified` — a check that could not be
made (Slack unavailable, rate limited, refused for a reason that is not about the
schedule). Not knowing is not a reason to post: an unverified run is not made now and the
schedule is looked at again later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from slack_sdk.web.async_client import AsyncWebClient

from gateway.slack.codes import Meaning, describe
from gateway.slack.errors import SlackError, SlackRefused
from gateway.slack.sharing import sharing_of
from gateway.slack.workspaces import NotInstalled, SlackClients
from gateway.text.markup import escape_entities
from gateway.text.rendering import neutralize_everywhere
from storage import Database, StoredSchedule, set_dm_channel

log = logging.getLogger(__name__)

# What Slack's refusal means when the run can never post there (gateway/slack/codes.py).
_UNRUNNABLE = frozenset({Meaning.TOKEN_REFUSED, Meaning.CONVERSATION_GONE, Meaning.PERSON_GONE})
# Why a message of a channel is not answered, given its sharing (True: shared with another
# organization; None: not known): "external", "unverified", or None when it is answered
# (the channel's `ChannelRules.refusal`, gateway/inbound/channel_rules.py).
Refusal: TypeAlias = Callable[[str, bool | None], str | None]
_PAGE = 200  # conversations.members: "we recommend no more than 200 results at a time"
_PROMPT_SHOWN = 80

SLACK_CONNECT = (
    "its channel is shared with another organization (Slack Connect), which the channel's "
    "policy does not answer"
)
OWNER_LEFT_CHANNEL = "its owner is no longer in the channel it posts in"
OWNER_DEACTIVATED = "its owner's account is deactivated"


@dataclass(frozen=True, slots=True)
class Runnable:
    """The run may go: it posts in `channel`."""

    channel: str


@dataclass(frozen=True, slots=True)
class Unrunnable:
    """The run must not go, ever, until someone steps in: the schedule is paused for
    `reason`; `tell_owner`: its owner hears of it too (they can still read a DM)."""

    reason: str
    tell_owner: bool = False


@dataclass(frozen=True, slots=True)
class Unverified:
    """A check could not be made (`why`): not now, look again later."""

    why: str


Verdict: TypeAlias = Runnable | Unrunnable | Unverified


class Preflight:
    """The checks before each run (module docstring), with each workspace's client."""

    def __init__(self, db: Database, clients: SlackClients, refusal: Refusal) -> None:
        self._db = db
        self._clients = clients
        self._refusal = refusal

    async def check(self, schedule: StoredSchedule) -> Verdict:
        try:
            client = await self._clients.for_team(schedule.team, schedule.enterprise)
            channel = schedule.channel or await self._open_dm(client, schedule)
            found = await self._conversation(client, channel)
            if found is None and schedule.owner_user is not None:
                found = await self._owner(client, schedule, channel)
            return found or Runnable(channel)
        except NotInstalled:
            return Unrunnable(describe("token_revoked"))
        except SlackRefused as exc:
            if exc.meaning in _UNRUNNABLE:
                gone = exc.meaning is Meaning.CONVERSATION_GONE
                return Unrunnable(describe(exc.error), tell_owner=gone)
            return Unverified(exc.error)
        except SlackError as exc:
            return Unverified(exc.reason)

    async def tell_owner(self, schedule: StoredSchedule, reason: str) -> None:
        """The owner hears, in their DM with the bot, that their schedule stopped and why."""
        owner = schedule.owner_user
        if owner is None:
            return
        client = await self._clients.for_team(schedule.team, schedule.enterprise)
        opened = await client.conversations_open(users=owner)
        dm = str((opened.get("channel") or {})["id"])
        await client.chat_postMessage(
            channel=dm,
            text=owner_notice(schedule, reason),
            parse="none",
            link_names=False,
        )

    async def _open_dm(self, client: AsyncWebClient, schedule: StoredSchedule) -> str:
        """The person's DM channel (conversations.open), kept for the next runs."""
        response = await client.conversations_open(users=schedule.dm_user)
        channel = str((response.get("channel") or {})["id"])
        await set_dm_channel(self._db, schedule.id, channel)
        return channel

    async def _conversation(self, client: AsyncWebClient, channel: str) -> Verdict | None:
        """Archived, or shared where its policy refuses that: why not; None: it may run.
        A DM with the bot is neither."""
        if channel.startswith("D"):
            return None
        info: dict[str, Any] = (await client.conversations_info(channel=channel)).get(
            "channel"
        ) or {}
        if info.get("is_archived"):
            return Unrunnable(describe("is_archived"), tell_owner=True)
        sharing = sharing_of(info)
        refusal = self._refusal(channel, None if sharing == "unknown" else sharing == "external")
        if refusal == "external":
            return Unrunnable(SLACK_CONNECT, tell_owner=True)
        if refusal == "unverified":
            return Unverified("conversations.info did not say whether the channel is shared")
        return None

    async def _owner(
        self, client: AsyncWebClient, schedule: StoredSchedule, channel: str
    ) -> Verdict | None:
        """The owner gone from the workspace, or (a schedule in a channel) from its channel:
        why not; None: they are there."""
        owner = schedule.owner_user
        assert owner is not None
        user: dict[str, Any] = (await client.users_info(user=owner)).get("user") or {}
        if user.get("deleted"):
            return Unrunnable(OWNER_DEACTIVATED)
        if schedule.target == "dm" or channel.startswith("D"):
            return None
        if not await self._is_member(client, channel, owner):
            return Unrunnable(OWNER_LEFT_CHANNEL, tell_owner=True)
        return None

    async def _is_member(self, client: AsyncWebClient, channel: str, user: str) -> bool:
        """Whether `user` is among `channel`'s members, page after page until found."""
        cursor = ""
        while True:
            page = await client.conversations_members(
                channel=channel, limit=_PAGE, **({"cursor": cursor} if cursor else {})
            )
            if user in (page.get("members") or []):
                return True
            cursor = ((page.get("response_metadata") or {}).get("next_cursor")) or ""
            if not cursor:
                return False


def owner_notice(schedule: StoredSchedule, reason: str) -> str:
    """What the owner is told: which schedule, why it stopped, what they can do."""
    prompt = " ".join(schedule.prompt.split())
    shown = prompt if len(prompt) <= _PROMPT_SHOWN else f"{prompt[: _PROMPT_SHOWN - 1]}…"
    quoted = escape_entities(neutralize_everywhere(shown))
    return (
        f":pause_button: Your schedule {schedule.id} ({schedule.recurrence.describe()}, "
        f"posting to {schedule.where}: “{quoted}”) is paused: {reason}. It will not run "
        "again unless an operator resumes it; you can also ask me to delete it."
    )
