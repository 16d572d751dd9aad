"""Conversations `FakeSlack`'s bot is not in, answered as Slack answers a bot outside them.

By default the bot is in every conversation. `slack.membership.leave(channel)` takes it
out of a public channel: `conversations.info` still answers (a public channel is visible
with `channels:read`), with `is_member: false`; `chat.postMessage`, `chat.postEphemeral`
and `chat.startStream` answer `not_in_channel` (docs.slack.dev, chat.postMessage:
"Cannot post user messages to a channel they are not in"). `leave(channel,
private=True)` is a private channel, a group DM or a DM between other people: the bot
cannot see it at all, so every one of those methods answers `channel_not_found`.

Kept here, not in `slack_api.py`, which only registers it (it wraps those methods).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Method = Callable[[dict[str, Any]], dict[str, Any]]
_POSTS = ("chat.postMessage", "chat.postEphemeral", "chat.startStream")


class FakeMembership:
    """Which conversations the bot is outside of (module docstring)."""

    def __init__(self, methods: dict[str, Method]) -> None:
        self.outside: dict[str, bool] = {}  # channel → private (invisible)
        for name in (*_POSTS, "conversations.info"):
            methods[name] = self._wrap(name, methods[name])

    def leave(self, channel: str, *, private: bool = False) -> None:
        self.outside[channel] = private

    def _wrap(self, name: str, method: Method) -> Method:
        def answer(params: dict[str, Any]) -> dict[str, Any]:
            channel = str(params.get("channel") or "")
            if channel not in self.outside:
                return method(params)
            if self.outside[channel]:
                return {"ok": False, "error": "channel_not_found"}
            if name in _POSTS:
                return {"ok": False, "error": "not_in_channel"}
            found = method(params)
            if found.get("ok"):
                found["channel"] = {**found["channel"], "is_member": False}
            return found

        return answer
