"""Inbound Slack Events API requests, built and signed the way Slack sends them.

threadgate's gateway is only trustworthy if it is tested against what Slack really sends:
the `event_callback` envelope, the event shapes (`app_mention`, `message` in a DM, bot
messages, `message_changed` edits, messages with files and thread broadcasts), the `v0`
HMAC-SHA256 signature over
`v0:{timestamp}:{body}`, and the `X-Slack-Retry-*` headers of a redelivery. The builders
here produce those payloads as plain dicts and `deliver` POSTs them over real HTTP::

    event = app_mention_event(text="<@UBOT> hello", channel="C0A1B2C3D4E")
    envelope = event_callback(event)
    status, body = await deliver(session, f"{base}/slack/events", envelope, SECRET)
    # Slack redelivers the *same* envelope (same event_id) when the ack was late:
    status, body = await deliver(session, url, envelope, SECRET, retry_num=1)

Clicks come as interaction payloads: `block_actions(message, …)` is the payload Slack sends
when someone clicks a button of a message (`FakeSlack.click` builds it from the stored
message, so only a button that was posted can be clicked), and `deliver_interaction` POSTs
it as Slack does — form-encoded, one `payload` field holding the JSON, signed over the
form body like an event (docs.slack.dev, "Handling user interaction").

A mention and a DM carry an `action_token`, as Slack's events do: the writer's short-lived
grant to search the workspace as them, which the fake Slack's search checks
(tests/fakes/slack_search.py).

Message timestamps come from `new_ts()`, a process-wide monotonic clock shared with
`slack_api.FakeSlack`, so a user's message and the bot's reply never share a ts and sort in
the order they happened.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

import aiohttp

from .slack_search import grant_action_token

DEFAULT_TEAM = "T1"
DEFAULT_APP = "A0APP00001"
DEFAULT_BOT_USER = "UBOT"
DEFAULT_USER = "U0A1B2C3D4E"
DEFAULT_CHANNEL = "C0A1B2C3D4E"
DEFAULT_DM = "D0A1B2C3D4E"
DEFAULT_BOT_ID = "B0OTHERBOT1"

_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
_event_ids = itertools.count(1)


class SlackClock:
    """Hands out unique, increasing Slack ts strings ("1700000000.000100") from the wall clock."""

    def __init__(self) -> None:
        self._last_us = 0

    def next(self) -> str:
        """A ts later than every ts handed out or observed so far."""
        self._last_us = max(time.time_ns() // 1000, self._last_us + 1)
        return ts_from_micros(self._last_us)

    def observe(self, ts: str) -> None:
        """Make every later `next()` sort after `ts` (a ts chosen by a test)."""
        self._last_us = max(self._last_us, ts_to_micros(ts))


CLOCK = SlackClock()


def new_ts() -> str:
    """A fresh, realistic Slack message ts, later than any handed out before in this process."""
    return CLOCK.next()


def ts_to_micros(ts: str) -> int:
    """Slack ts "1700000000.000100" as integer microseconds (for sorting and comparing)."""
    seconds, _, fraction = ts.partition(".")
    return int(seconds) * 1_000_000 + int(fraction.ljust(6, "0")[:6] or "0")


def ts_from_micros(micros: int) -> str:
    """Integer microseconds as a Slack ts string."""
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


def new_event_id() -> str:
    """A unique Events API event id in Slack's form ("Ev0000000001")."""
    return f"Ev{next(_event_ids):010d}"


def rich_text_blocks(text: str) -> list[dict[str, Any]]:
    """The `rich_text` block Slack attaches to a user message, with `<@U…>` as user elements."""
    elements: list[dict[str, Any]] = []
    position = 0
    for match in _MENTION.finditer(text):
        if match.start() > position:
            elements.append({"type": "text", "text": _unescape(text[position : match.start()])})
        elements.append({"type": "user", "user_id": match.group(1)})
        position = match.end()
    if position < len(text):
        elements.append({"type": "text", "text": _unescape(text[position:])})
    section = {"type": "rich_text_section", "elements": elements}
    return [{"type": "rich_text", "block_id": uuid.uuid4().hex[:5], "elements": [section]}]


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _user_message(
    *, text: str, user: str, channel: str, ts: str | None, thread_ts: str | None, team: str
) -> dict[str, Any]:
    ts = ts or new_ts()
    event: dict[str, Any] = {
        "user": user,
        "type": "message",
        "ts": ts,
        "client_msg_id": str(uuid.uuid4()),
        "text": text,
        "team": team,
        "blocks": rich_text_blocks(text),
        "channel": channel,
        "event_ts": ts,
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event


def app_mention_event(
    *,
    text: str,
    user: str = DEFAULT_USER,
    channel: str = DEFAULT_CHANNEL,
    ts: str | None = None,
    thread_ts: str | None = None,
    team: str = DEFAULT_TEAM,
) -> dict[str, Any]:
    """An `app_mention` event; `text` is verbatim, so include the mention (`<@UBOT> hi`).
    It carries an `action_token`, as Slack's do: the writer's grant to search
    (tests/fakes/slack_search.py)."""
    event = _user_message(
        text=text, user=user, channel=channel, ts=ts, thread_ts=thread_ts, team=team
    )
    event["type"] = "app_mention"
    event["action_token"] = grant_action_token(user, team)
    return event


def message_event(
    *,
    text: str,
    user: str = DEFAULT_USER,
    channel: str = DEFAULT_CHANNEL,
    channel_type: str = "channel",
    ts: str | None = None,
    thread_ts: str | None = None,
    team: str = DEFAULT_TEAM,
) -> dict[str, Any]:
    """A plain user `message` event (`channel_type` "channel", "group", "im" or "mpim")."""
    event = _user_message(
        text=text, user=user, channel=channel, ts=ts, thread_ts=thread_ts, team=team
    )
    event["channel_type"] = channel_type
    return event


def dm_message_event(
    *,
    text: str,
    user: str = DEFAULT_USER,
    channel: str = DEFAULT_DM,
    ts: str | None = None,
    thread_ts: str | None = None,
    team: str = DEFAULT_TEAM,
) -> dict[str, Any]:
    """A user's `message` in a direct message with the bot (`channel_type` "im"), with its
    `action_token` (tests/fakes/slack_search.py)."""
    event = message_event(
        text=text,
        user=user,
        channel=channel,
        channel_type="im",
        ts=ts,
        thread_ts=thread_ts,
        team=team,
    )
    event["action_token"] = grant_action_token(user, team)
    return event


def slack_file(
    *,
    name: str = "report.pdf",
    mimetype: str = "application/pdf",
    filetype: str = "pdf",
    size: int = 48_213,
    user: str = DEFAULT_USER,
    team: str = DEFAULT_TEAM,
) -> dict[str, Any]:
    """A file object as Slack puts it in a message's `files` (the fields that matter, and
    the private URLs the bot token could fetch it from)."""
    file_id = f"F{uuid.uuid4().hex[:10].upper()}"
    url = f"https://files.slack.com/files-pri/{team}-{file_id}/{name}"
    return {
        "id": file_id,
        "created": int(time.time()),
        "timestamp": int(time.time()),
        "name": name,
        "title": name,
        "mimetype": mimetype,
        "filetype": filetype,
        "pretty_type": filetype.upper(),
        "user": user,
        "user_team": team,
        "editable": False,
        "size": size,
        "mode": "hosted",
        "is_external": False,
        "external_type": "",
        "is_public": False,
        "public_url_shared": False,
        "display_as_bot": False,
        "username": "",
        "url_private": url,
        "url_private_download": url.replace("files-pri", "files-pri/download", 1),
        "permalink": f"https://example.slack.com/files/{user}/{file_id}/{name}",
        "has_rich_preview": False,
    }


def file_share_event(
    *,
    text: str = "",
    files: list[dict[str, Any]] | None = None,
    user: str = DEFAULT_USER,
    channel: str = DEFAULT_DM,
    channel_type: str = "im",
    ts: str | None = None,
    thread_ts: str | None = None,
    team: str = DEFAULT_TEAM,
) -> dict[str, Any]:
    """A message with files (`subtype: file_share`), in a DM unless told otherwise. `text`
    is the message typed with the files, often empty."""
    event = message_event(
        text=text,
        user=user,
        channel=channel,
        channel_type=channel_type,
        ts=ts,
        thread_ts=thread_ts,
        team=team,
    )
    event |= {
        "subtype": "file_share",
        "files": files if files is not None else [slack_file(user=user, team=team)],
        "upload": True,
        "display_as_bot": False,
    }
    if not text:
        event.pop("blocks")
    return event


def thread_broadcast_event(
    *,
    text: str,
    thread_ts: str,
    user: str = DEFAULT_USER,
    channel: str = DEFAULT_CHANNEL,
    channel_type: str = "channel",
    ts: str | None = None,
    team: str = DEFAULT_TEAM,
) -> dict[str, Any]:
    """A thread reply also sent to the channel (`subtype: thread_broadcast`)."""
    event = message_event(
        text=text,
        user=user,
        channel=channel,
        channel_type=channel_type,
        ts=ts,
        thread_ts=thread_ts,
        team=team,
    )
    root = {"type": "message", "user": user, "text": "…", "ts": thread_ts, "thread_ts": thread_ts}
    event |= {"subtype": "thread_broadcast", "root": root}
    return event


def bot_message_event(
    *,
    text: str,
    channel: str = DEFAULT_CHANNEL,
    bot_id: str = DEFAULT_BOT_ID,
    user: str | None = None,
    app_id: str = DEFAULT_APP,
    ts: str | None = None,
    thread_ts: str | None = None,
    channel_type: str = "channel",
    team: str = DEFAULT_TEAM,
) -> dict[str, Any]:
    """A message from a bot: with `user` (an app's bot user, e.g. our own) the modern shape
    Slack sends for bot-token posts (no subtype, `bot_id` + `app_id`); without, the legacy
    `subtype: bot_message` shape."""
    ts = ts or new_ts()
    event: dict[str, Any] = {
        "type": "message",
        "text": text,
        "ts": ts,
        "bot_id": bot_id,
        "app_id": app_id,
        "team": team,
        "channel": channel,
        "event_ts": ts,
        "channel_type": channel_type,
    }
    if user is None:
        event["subtype"] = "bot_message"
        event["username"] = "some-bot"
    else:
        event["user"] = user
        event["bot_profile"] = {"id": bot_id, "app_id": app_id, "name": "bot", "team_id": team}
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event


def message_changed_event(
    *,
    ts: str,
    new_text: str,
    old_text: str,
    user: str = DEFAULT_USER,
    channel: str = DEFAULT_CHANNEL,
    channel_type: str = "channel",
    thread_ts: str | None = None,
    edited_ts: str | None = None,
) -> dict[str, Any]:
    """The hidden `message_changed` event Slack sends when the message at `ts` is edited."""
    edited_ts = edited_ts or new_ts()
    previous: dict[str, Any] = {"type": "message", "user": user, "text": old_text, "ts": ts}
    message = {**previous, "text": new_text, "edited": {"user": user, "ts": edited_ts}}
    if thread_ts is not None:
        previous["thread_ts"] = message["thread_ts"] = thread_ts
    return {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "message": message,
        "previous_message": previous,
        "channel": channel,
        "channel_type": channel_type,
        "ts": edited_ts,
        "event_ts": edited_ts,
    }


def message_deleted_event(
    *,
    ts: str,
    old_text: str = "",
    user: str = DEFAULT_USER,
    channel: str = DEFAULT_CHANNEL,
    channel_type: str = "channel",
    thread_ts: str | None = None,
) -> dict[str, Any]:
    """The hidden `message_deleted` event Slack sends when the message at `ts` is deleted."""
    now = new_ts()
    previous: dict[str, Any] = {"type": "message", "user": user, "text": old_text, "ts": ts}
    if thread_ts is not None:
        previous["thread_ts"] = thread_ts
    return {
        "type": "message",
        "subtype": "message_deleted",
        "hidden": True,
        "deleted_ts": ts,
        "previous_message": previous,
        "channel": channel,
        "channel_type": channel_type,
        "ts": now,
        "event_ts": now,
    }


def agent_session_stopped_event(
    *,
    thread_ts: str,
    channel: str = DEFAULT_CHANNEL,
    user: str = DEFAULT_USER,
    streaming_message_ts: Sequence[str] = (),
) -> dict[str, Any]:
    """Someone pressed Stop on a thread's agent session (docs.slack.dev
    `agent_session_stopped`): the streams Slack stopped, empty when none was streaming; the
    team is on the envelope (`event_callback`)."""
    return {
        "type": "agent_session_stopped",
        "channel": channel,
        "thread_ts": thread_ts,
        "user": user,
        "streaming_message_ts": list(streaming_message_ts),
        "event_ts": new_ts(),
    }


def app_home_opened_event(
    *, channel: str = DEFAULT_DM, user: str = DEFAULT_USER, tab: str = "messages"
) -> dict[str, Any]:
    """A person opened the app's home (docs.slack.dev `app_home_opened`): `tab` is
    "messages" for the DM with the app (the agent messaging experience), or "home"."""
    return {
        "type": "app_home_opened",
        "user": user,
        "channel": channel,
        "tab": tab,
        "event_ts": new_ts(),
    }


def event_callback(
    event: Mapping[str, Any],
    *,
    team_id: str = DEFAULT_TEAM,
    api_app_id: str = DEFAULT_APP,
    bot_user_id: str = DEFAULT_BOT_USER,
    event_id: str | None = None,
    event_time: int | None = None,
    token: str = "verification-token-unused",
    ext_shared: bool | None = False,
) -> dict[str, Any]:
    """Wrap an event in Slack's `event_callback` envelope (fresh `event_id` unless given).
    `ext_shared` is the envelope's `is_ext_shared_channel` (True in a Slack Connect
    channel); None leaves it out, as older payloads do."""
    envelope = {
        "token": token,
        "team_id": team_id,
        "context_team_id": team_id,
        "context_enterprise_id": None,
        "api_app_id": api_app_id,
        "event": dict(event),
        "type": "event_callback",
        "event_id": event_id or new_event_id(),
        "event_time": event_time if event_time is not None else int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": ext_shared,
    }
    if ext_shared is None:
        del envelope["is_ext_shared_channel"]
    return envelope


def url_verification(
    challenge: str = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
) -> dict[str, Any]:
    """The `url_verification` request Slack sends when the Request URL is configured."""
    return {
        "token": "verification-token-unused",
        "challenge": challenge,
        "type": "url_verification",
    }


def sign(body: bytes, secret: str, timestamp: int) -> dict[str, str]:
    """Slack's request-signing headers: `v0=` HMAC-SHA256 of `v0:{timestamp}:{body}`."""
    base = b"v0:" + str(timestamp).encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(timestamp), "X-Slack-Signature": f"v0={digest}"}


async def deliver(
    session: aiohttp.ClientSession,
    url: str,
    envelope: Mapping[str, Any],
    secret: str,
    *,
    retry_num: int | None = None,
    retry_reason: str | None = None,
    timestamp: int | None = None,
    bad_signature: bool = False,
) -> tuple[int, str]:
    """POST an envelope to `url` as Slack does; returns (HTTP status, response body text).

    `retry_num` adds `X-Slack-Retry-Num` and `X-Slack-Retry-Reason` (default `http_timeout`);
    `timestamp` overrides the signing time (a stale one must be refused); `bad_signature`
    signs with the wrong secret, so the header is well-formed but does not verify.
    """
    body = json.dumps(envelope, separators=(",", ":")).encode()
    signed_at = timestamp if timestamp is not None else int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
    }
    headers |= sign(body, f"{secret}-wrong" if bad_signature else secret, signed_at)
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = retry_reason or "http_timeout"
    async with session.post(url, data=body, headers=headers) as response:
        return response.status, await response.text()


def block_actions(
    message: Mapping[str, Any],
    *,
    channel: str,
    action_id: str,
    user: str = DEFAULT_USER,
    team: str = DEFAULT_TEAM,
    app_id: str = DEFAULT_APP,
    vote: str | None = None,
) -> dict[str, Any]:
    """The `block_actions` payload of `user` clicking the element `action_id` of `message`
    (for feedback buttons, its `vote` button: "positive" or "negative"), as Slack's
    reference shows it: who clicked, the container (the message and its thread), the
    message itself, and one action with the element's `action_id`, `block_id`, `type` and
    the `value` of what was clicked."""
    block, element = _element(message, action_id)
    action: dict[str, Any] = {
        "action_id": action_id,
        "block_id": block.get("block_id", uuid.uuid4().hex[:5]),
        "type": element["type"],
        "action_ts": new_ts(),
    }
    if element["type"] == "feedback_buttons":
        if vote not in ("positive", "negative"):
            raise AssertionError("a feedback click needs vote='positive' or 'negative'")
        button = element[f"{vote}_button"]
        action |= {"value": button["value"], "text": button["text"]}
    else:
        action |= {k: element[k] for k in ("value", "text", "style") if k in element}
    container = {
        "type": "message",
        "message_ts": message["ts"],
        "channel_id": channel,
        "is_ephemeral": False,
    }
    if message.get("thread_ts"):
        container["thread_ts"] = message["thread_ts"]
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": team},
        "api_app_id": app_id,
        "token": "verification-token-unused",
        "container": container,
        "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}",
        "team": {"id": team, "domain": "threadgate-test"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "general"},
        "message": dict(message),
        "state": {"values": {}},
        "response_url": f"https://hooks.slack.com/actions/{team}/1/{uuid.uuid4().hex}",
        "actions": [action],
    }


def _element(message: Mapping[str, Any], action_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    for block in message.get("blocks") or []:
        for element in _elements(block):
            if element.get("action_id") == action_id:
                return block, element
    raise AssertionError(f"the message {message.get('ts')} has no element {action_id!r} to click")


def _elements(block: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    elements = block.get("elements")
    if block.get("type") in ("actions", "context_actions") and isinstance(elements, list):
        yield from (e for e in elements if isinstance(e, dict))
    accessory = block.get("accessory")
    if isinstance(accessory, dict):
        yield accessory


async def deliver_interaction(
    session: aiohttp.ClientSession,
    url: str,
    payload: Mapping[str, Any],
    secret: str,
    *,
    timestamp: int | None = None,
    bad_signature: bool = False,
) -> tuple[int, str]:
    """POST an interaction payload to `url` as Slack does: `payload=<JSON>`, form-encoded,
    signed over that body; returns (HTTP status, response body text)."""
    body = urlencode({"payload": json.dumps(payload, separators=(",", ":"))}).encode()
    signed_at = timestamp if timestamp is not None else int(time.time())
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
    }
    headers |= sign(body, f"{secret}-wrong" if bad_signature else secret, signed_at)
    async with session.post(url, data=body, headers=headers) as response:
        return response.status, await response.text()
