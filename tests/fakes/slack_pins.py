"""Pin events as Slack sends them (`pin_added`, `pin_removed`; scope `pins:read`).

The event names the channel (`channel_id`) and the pinned item; for a message, the item
carries the message as `conversations.history` would return it (ts, thread_ts, user or
bot_id, text), plus who pinned it and when.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from tests.fakes.slack_events import DEFAULT_CHANNEL, DEFAULT_USER, new_ts


def pinned_message(
    *,
    text: str,
    ts: str,
    user: str | None = DEFAULT_USER,
    thread_ts: str | None = None,
    bot_id: str | None = None,
) -> dict[str, Any]:
    """A message as a pin event's `item.message` carries it."""
    message: dict[str, Any] = {"type": "message", "ts": ts, "text": text}
    if user is not None:
        message["user"] = user
    if thread_ts is not None:
        message["thread_ts"] = thread_ts
    if bot_id is not None:
        message["bot_id"] = bot_id
    return message


def pin_event(
    message: Mapping[str, Any],
    *,
    added: bool = True,
    channel: str = DEFAULT_CHANNEL,
    pinned_by: str = DEFAULT_USER,
) -> dict[str, Any]:
    """A `pin_added` (or `pin_removed`) event for `message` in `channel`."""
    now = int(time.time())
    event: dict[str, Any] = {
        "type": "pin_added" if added else "pin_removed",
        "user": pinned_by,
        "channel_id": channel,
        "item": {
            "type": "message",
            "channel": channel,
            "message": dict(message),
            "created": now,
            "created_by": pinned_by,
        },
        "item_user": message.get("user", ""),
        "pin_count": "1",
        "pinned_info": {"channel": channel, "pinned_by": pinned_by, "pinned_ts": now},
        "event_ts": new_ts(),
    }
    if not added:
        event["has_pins"] = False
    return event


def file_pin_event(*, channel: str = DEFAULT_CHANNEL) -> dict[str, Any]:
    """A file pinned (not a message): nothing for the conversation's memory."""
    event = pin_event(pinned_message(text="", ts=new_ts()), channel=channel)
    event["item"] = {"type": "file", "channel": channel, "file": {"id": "F0A1B2C3D4E"}}
    return event
