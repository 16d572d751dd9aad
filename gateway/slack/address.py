"""Where a task's messages go in Slack, read once from the task's address.

A task's address (`agent.Task.address`) is the string mapping the gatekeeper stored at
admission (gateway/inbound/gatekeeper.py writes it): `agent/` knows no Slack, so it carries the
keys without their meaning. Code that talks to Slack reads it once into a `SlackAddress`
rather than looking keys up wherever it needs one — a misspelt key is then a type error,
not a `KeyError` in the middle of a post.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# How `shared` is stored: the channel is shared with another organization (Slack Connect).
SHARED = "external"


@dataclass(frozen=True, slots=True)
class SlackAddress:
    """A task's conversation: its `channel` and `thread_ts` (the thread's root; "" for a
    post at the top of the channel, as a schedule's run there makes: `top_level`); the
    `team` (and on Enterprise Grid the `enterprise`) whose installation's client calls
    Slack for it (gateway/slack/workspaces.py); the `user` who asked, to whom a stream
    outside a DM is addressed, and `user_team`, that user's own workspace when it is not
    `team` (a Slack Connect channel); `shared`, a channel shared with another organization
    (or whose sharing could not be checked), and `redacted`, how many credentials were
    taken out of the message. Older tasks may lack team and user."""

    channel: str
    thread_ts: str
    team: str | None = None
    user: str | None = None
    enterprise: str | None = None
    user_team: str | None = None
    shared: bool = False
    redacted: int = 0

    @classmethod
    def parse(cls, address: Mapping[str, str]) -> SlackAddress:
        """The address of a task, from `task.address`; `KeyError` without a channel or a
        thread (no task is admitted without them)."""
        return cls(
            channel=address["channel"],
            thread_ts=address["thread_ts"],
            team=address.get("team"),
            user=address.get("user"),
            enterprise=address.get("enterprise"),
            user_team=address.get("user_team"),
            shared=address.get("shared") == SHARED,
            redacted=int(redacted) if (redacted := address.get("redacted", "")).isdigit() else 0,
        )

    @property
    def top_level(self) -> bool:
        """Its posts go at the top of the channel, each opening a thread of its own."""
        return not self.thread_ts

    @property
    def is_dm(self) -> bool:
        """A direct message with the bot (Slack's DM channel ids start with D)."""
        return self.channel.startswith("D")

    @property
    def recipient_team(self) -> str | None:
        """The workspace of the user a stream is addressed to: in a Slack Connect channel
        their own, not the installation's."""
        return self.user_team or self.team
