"""What the gatekeeper enforces for one channel: whether it is answered when it is shared
with another organization (Slack Connect), and the limits its messages are admitted within.

The rules come from the channel config file (`THREADGATE_CHANNEL_CONFIG`,
gateway/config/channel_config.py), asked per message by channel id, so a reload applies
from the next message on. Without a file every channel has `DEFAULT_RULES`: a channel
shared with another organization is refused, and the deployment's limits apply.

A refused message costs no model call: it is acked, stored like an over-limit message,
and the first of its thread on a day is answered with one short notice (`REFUSAL_NOTICES`,
the admission's `refused`, storage/admission.py). The channel's sharing is what Slack says
on the event, else `conversations.info` (gateway/slack/sharing.py); a check that cannot be
made refuses (`unverified`) where external channels are refused, and where they are
allowed it counts the channel as shared, so its authors of other teams are still marked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from agent import ThreadQueueMode
from storage import Limits, LimitScope

External: TypeAlias = Literal["refuse", "allow"]

REFUSAL_NOTICES: Mapping[LimitScope, str] = {
    "external": (
        "Sorry, I don't answer in channels shared with other organizations (Slack Connect), "
        "so I won't answer in this thread."
    ),
    "unverified": (
        "Sorry, I couldn't check whether this channel is shared with another organization, "
        "so I won't answer here for now. Please try again later."
    ),
}


@dataclass(frozen=True, slots=True)
class ChannelRules:
    """One channel's admission rules."""

    external: External = "refuse"
    limits: Limits | None = None  # None: the deployment's
    # How many recent channel messages a top-level mention carries (None: the deployment's).
    context_messages: int | None = None
    # Its threads' queue mode: under `interrupt` a new message of the person whose task
    # works there stops that task to answer everything at once (storage/thread_queue.py).
    thread_queue: ThreadQueueMode = "collect"

    def refusal(self, shared: bool | None) -> LimitScope | None:
        """Why a message of this channel is not answered, given its sharing (None: it
        could not be checked); None when it is answered."""
        if self.external == "allow" or shared is False:
            return None
        return "external" if shared else "unverified"


DEFAULT_RULES = ChannelRules()

# The rules of a channel, by its id (the gateway's `ChannelPolicies.rules_of`).
RulesOf: TypeAlias = Callable[[str], ChannelRules]
