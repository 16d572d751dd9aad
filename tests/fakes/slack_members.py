"""What `FakeSlack` answers to `conversations.members`: a conversation's member ids, a page
at a time.

As Slack's reference says (docs.slack.dev, conversations.members; scopes `channels:read`,
`groups:read`, `im:read`, `mpim:read`; Tier 4): arguments `channel` (required), `cursor`
and `limit` (default 100, at most 999: "specify a limit value under 1000"); the answer is
`{"ok": true, "members": ["U…", …], "response_metadata": {"next_cursor": "…"}}`, the
cursor empty on the last page. A page may hold fewer than `limit` members. Errors:
`channel_not_found` (no channel given, or one that is gone), `invalid_cursor`,
`invalid_limit`. The cursor is opaque; Slack's look like base64 of `user:U…` (its
reference's example, `dXNlcjpVMDYxTkZUVDI=`), and so do ours: the first member of the next
page.

A channel's members are what a test set (`members.set(channel, [...])`, `members.leave`);
one it never set has every person the fake knows (`FakeSlack.add_user`), the bot included,
as a workspace's general channel does.

Kept here, not in `slack_api.py`, which only registers the method.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Set
from typing import Any

_DEFAULT_LIMIT = 100
_MAX_LIMIT = 999


class FakeMembers:
    """Who is in each conversation, paged as Slack pages it."""

    def __init__(self, users: Mapping[str, Any], gone: Set[str]) -> None:
        self._users = users  # the fake's people (users.info): the default members
        self._gone = gone  # deleted channels: channel_not_found
        self._members: dict[str, list[str]] = {}

    def of(self, channel: str) -> list[str]:
        """The members of `channel` now."""
        return list(self._members.get(channel, self._users))

    def set(self, channel: str, members: list[str]) -> None:
        self._members[channel] = list(members)

    def leave(self, channel: str, user: str) -> None:
        """`user` leaves `channel` (or is removed from it)."""
        self._members[channel] = [m for m in self.of(channel) if m != user]

    def list(self, params: Mapping[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel") or "")
        if not channel or channel in self._gone:
            return {"ok": False, "error": "channel_not_found"}
        limit = _limit(params.get("limit"))
        if limit is None:
            return {"ok": False, "error": "invalid_limit"}
        members = self.of(channel)
        start = _start(params.get("cursor"), members)
        if start is None:
            return {"ok": False, "error": "invalid_cursor"}
        page = members[start : start + limit]
        rest = members[start + limit :]
        next_cursor = _cursor(rest[0]) if rest else ""
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": next_cursor}}


def _limit(value: Any) -> int | None:
    if value in (None, "", 0, "0"):
        return _DEFAULT_LIMIT
    try:
        limit = int(value)
    except (TypeError, ValueError):
        return None
    return limit if 1 <= limit <= _MAX_LIMIT else None


def _cursor(member: str) -> str:
    return base64.b64encode(f"user:{member}".encode()).decode()


def _start(cursor: Any, members: list[str]) -> int | None:
    """Where the page the cursor names starts (0 without one); None: not a cursor of ours."""
    if not cursor:
        return 0
    try:
        kind, _, member = base64.b64decode(str(cursor), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    if kind != "user" or member not in members:
        return None
    return members.index(member)
