"""What `FakeSlack` answers to `chat.getPermalink`: a message's permalink, as Slack spells it.

Slack answers `{"ok": true, "channel": C, "permalink": URL}` where URL is
`https://{workspace}.slack.com/archives/{channel}/p{ts without the dot}`, with
`?thread_ts={root}&cid={channel}` for a reply in a thread (docs.slack.dev, method
chat.getPermalink). A message the fake does not hold answers `message_not_found`, a call
without a channel `channel_not_found`, as Slack does. Kept here, not in `slack_api.py`,
which only registers the method.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

WORKSPACE_URL = "https://threadgate-test.slack.com"


def permalink(
    messages: Mapping[str, Sequence[Mapping[str, Any]]], params: Mapping[str, Any]
) -> dict[str, Any]:
    """The `chat.getPermalink` answer for `params` against the fake's message store."""
    channel = str(params.get("channel") or "")
    ts = str(params.get("message_ts") or "")
    if not channel:
        return {"ok": False, "error": "channel_not_found"}
    message = next((m for m in messages.get(channel, ()) if m.get("ts") == ts), None)
    if message is None:
        return {"ok": False, "error": "message_not_found"}
    link = f"{WORKSPACE_URL}/archives/{channel}/p{ts.replace('.', '')}"
    root = message.get("thread_ts")
    if root and root != ts:
        link += f"?thread_ts={root}&cid={channel}"
    return {"ok": True, "channel": channel, "permalink": link}
