"""What the Slack app must be granted: its bot scopes and the events it subscribes to.

Declared once, here, because three readers must agree on it: `threadgate manifest` puts it
in the app manifest, `threadgate doctor` compares it with the scopes Slack reports for the
installed token, and the tests compare it with what the code actually calls and handles.
A scope added to the code but not here shows up as a `missing_scope` error in production;
a scope listed here but not used is a permission nobody should have to approve.

Workspace search (`THREADGATE_WORKSPACE_SEARCH`) adds the Real-time Search scopes, and only
while it is on.

Both depend on the settings: answering replies in threads without a mention
(`THREADGATE_CONTINUE_THREADS`) needs the channel message events — Slack sends a channel
message to an app only if it subscribes to them — and their history scopes. Without it the
app is not sent every message of its channels.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# Every bot scope the app may need, in manifest order, with the reason doctor gives.
SCOPE_REASONS: Mapping[str, str] = MappingProxyType(
    {
        "app_mentions:read": "receive app_mention events when someone mentions the bot in a channel",
        "channels:history": "back-fill a public channel thread the bot is mentioned in (conversations.replies) and, with THREADGATE_CONTINUE_THREADS, receive the replies in threads it takes part in (message.channels)",
        "groups:history": "back-fill a private channel thread the bot is mentioned in (conversations.replies) and, with THREADGATE_CONTINUE_THREADS, receive the replies in threads it takes part in (message.groups)",
        "mpim:history": "receive the replies in group DM threads the bot takes part in (message.mpim), for THREADGATE_CONTINUE_THREADS",
        "im:history": "receive direct messages (message.im) and read DM threads",
        "chat:write": (
            "post acknowledgments, replies, failure notices, operator alerts and approval "
            "requests (updated once decided), tell someone privately (chat.postEphemeral), "
            "and keep a working thread's agent session in 'processing' "
            "(agents.sessions.setStatus)"
        ),
        "users:read": "show people's display names in the provenance tag (users.info), and before a person's schedule runs, check that its owner is still in the workspace",
        "assistant:write": "show 'is thinking…' in the thread while a task runs (assistant.threads.setStatus) and offer suggested prompts in the DM (assistant.threads.setSuggestedPrompts)",
        "metadata.message:read": "read our posts' metadata back to settle a post whose outcome is unknown",
        "files:read": "download the files people attach to messages (and describe with files.info those an event gives only by id), so the model can read them (THREADGATE_FILE_TYPES)",
        "pins:read": "keep messages pinned in a thread in the model's view (pin_added, pin_removed)",
        "channels:read": "check whether a public channel is shared with another organization (conversations.info) when its event does not say, to refuse Slack Connect by default; and, before a schedule runs, that its channel is still there, not archived and not shared against its policy, and that its owner is still a member (conversations.members)",
        "groups:read": "check whether a private channel is shared with another organization (conversations.info) when its event does not say; and, before a schedule runs, that its channel is still there, not archived and not shared against its policy, and that its owner is still a member (conversations.members)",
        "im:read": "check whether a direct message is with someone of another organization (conversations.info) when its event does not say",
        "mpim:read": "check whether a group DM is shared with another organization (conversations.info) when its event does not say",
        "im:write": "open a person's DM with the bot for a schedule that posts there, or for the answer to their shortcut on a message the bot cannot reply beside (conversations.open)",
        "commands": "take the slash command (THREADGATE_SLASH_COMMAND, /threadgate by default: status, stop, new, usage and schedules, answered to the person alone) and offer the 'Ask threadgate about this message' message shortcut",
        "search:read.public": "search public channels as the person asking (search_workspace: assistant.search.context), with THREADGATE_WORKSPACE_SEARCH",
        "search:read.private": "search the private channels the person asking is in, from a DM with the bot (search_workspace), with THREADGATE_WORKSPACE_SEARCH",
        "search:read.mpim": "search the person's group DMs, from a DM with the bot (search_workspace), with THREADGATE_WORKSPACE_SEARCH",
        "search:read.im": "search the person's DMs, from a DM with the bot (search_workspace), with THREADGATE_WORKSPACE_SEARCH",
    }
)

# The Events API subscriptions `gateway.slack.events.inbound_turn` turns into work: mentions and
# DMs always; the channel kinds' messages only to continue threads without a mention.
_ALWAYS = ("app_mention", "message.im")
_CONTINUATION = ("message.channels", "message.groups", "message.mpim")
# Scopes only the continuation events need (channels and groups history serve back-fill too).
_CONTINUATION_ONLY = frozenset({"mpim:history"})
# Scopes only workspace search needs (THREADGATE_WORKSPACE_SEARCH): Real-time Search by
# channel type (gateway/slack/search_tool.py says which types it searches where).
SEARCH_SCOPES = frozenset(
    {"search:read.public", "search:read.private", "search:read.mpim", "search:read.im"}
)
# Pins keep a thread's pinned messages in the model's window (gateway/inbound/pins.py).
_PINS = ("pin_added", "pin_removed")
# Slack's agent experience: the Stop button of a working thread (gateway/inbound/stops.py;
# without it Slack shows no Stop button), and the DM with the app opened, to offer its
# suggested prompts (gateway/inbound/app_home.py), or its Home tab, to publish the
# person's view (gateway/inbound/home_tab.py).
_AGENT = ("agent_session_stopped", "app_home_opened")


def bot_events(*, continue_threads: bool) -> tuple[str, ...]:
    """The bot events to subscribe to with these settings."""
    return (_ALWAYS + _CONTINUATION if continue_threads else _ALWAYS) + _PINS + _AGENT


# An uninstall or a revoked bot token must reach us, to stop the workspace's tasks and
# erase what we stored of it (and with many workspaces, forget it). Neither needs a scope.
UNINSTALL_EVENTS = ("app_uninstalled", "tokens_revoked")


def bot_scopes(*, continue_threads: bool, workspace_search: bool = False) -> tuple[str, ...]:
    """The bot scopes to request with these settings, in manifest order."""
    return tuple(
        scope
        for scope in SCOPE_REASONS
        if (continue_threads or scope not in _CONTINUATION_ONLY)
        and (workspace_search or scope not in SEARCH_SCOPES)
    )


def missing_scopes(
    granted: set[str], *, continue_threads: bool, workspace_search: bool = False
) -> list[str]:
    """The required scopes not in `granted`, in declaration order."""
    needed = bot_scopes(continue_threads=continue_threads, workspace_search=workspace_search)
    return [s for s in needed if s not in granted]


def parse_granted(header: str) -> set[str]:
    """Slack's `x-oauth-scopes` header ("chat:write,users:read") as a set."""
    return {scope.strip() for scope in header.split(",") if scope.strip()}
