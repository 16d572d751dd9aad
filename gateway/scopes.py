"""What the Slack app must be granted: its bot scopes and the events it subscribes to.

Declared once, here, because three readers must agree on it: `threadgate manifest` puts it
in the app manifest, `threadgate doctor` compares it with the scopes Slack reports for the
installed token, and the tests compare it with what the code actually calls and handles.
A scope added to the code but not here shows up as a `missing_scope` error in production;
a scope listed here but not used is a permission nobody should have to approve.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

REQUIRED_BOT_SCOPES: Mapping[str, str] = MappingProxyType(
    {
        "app_mentions:read": "receive app_mention events when someone mentions the bot in a channel",
        "channels:history": "back-fill a public channel thread the bot is mentioned in (conversations.replies)",
        "groups:history": "back-fill a private channel thread the bot is mentioned in (conversations.replies)",
        "im:history": "receive direct messages (message.im) and read DM threads",
        "chat:write": "post acknowledgments, replies, failure notices and operator alerts",
        "users:read": "show people's display names in the provenance tag (users.info)",
        "assistant:write": "show 'is thinking…' in the thread while a task runs (assistant.threads.setStatus)",
        "metadata.message:read": "read our posts' metadata back to settle a post whose outcome is unknown",
    }
)

# The Events API subscriptions `gateway.inbound.inbound_turn` turns into work.
BOT_EVENTS: tuple[str, ...] = ("app_mention", "message.im")


def missing_scopes(granted: set[str]) -> list[str]:
    """The required scopes not in `granted`, in declaration order."""
    return [scope for scope in REQUIRED_BOT_SCOPES if scope not in granted]


def parse_granted(header: str) -> set[str]:
    """Slack's `x-oauth-scopes` header ("chat:write,users:read") as a set."""
    return {scope.strip() for scope in header.split(",") if scope.strip()}
