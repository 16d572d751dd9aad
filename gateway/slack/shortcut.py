"""The "Ask threadgate about this message" shortcut on the wire: its manifest entry, the
modal it opens, and the two payloads Slack sends for it.

A message shortcut is an entry in a message's "More actions" menu (manifest
`features.shortcuts`, type `message`, with our `callback_id`; it needs the `commands`
scope). Pressing it sends a `message_action` interaction payload (docs.slack.dev,
"Shortcuts interaction payloads"): who pressed it (`user`), where (`channel`), the whole
message (`message`: text, author, ts, thread_ts, files) and a `trigger_id`, good for one
`views.open` within 3 seconds. The modal (`ask_modal`) asks what to do with the message,
prefilled with an editable "Summarize this"; submitting it sends a `view_submission`
payload with the view (its `id`, `callback_id`, `private_metadata`) and what was typed
(`view.state.values[block_id][action_id].value`).

Nothing of the message is stored when the modal opens: the modal carries it, in its
`private_metadata` (at most 3,000 characters, returned only to us in the signed
submission), so what the submission asks about is what Slack showed the person. A text
too long for it is cut there (`QuotedMessage.cut` says so, and the model is told).

The trust boundary for both payloads: pydantic checks their shape, and one we cannot read
is `MalformedEvent` (a 400, or a refused envelope), like any event.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.slack.events import (
    MalformedEvent,
    SlackId,
    SlackTs,
    bot_of,
    shared_files,
    summary,
)

ASK_SHORTCUT = "threadgate_ask"  # the shortcut's callback id (manifest and payload)
ASK_VIEW = "threadgate_ask_view"  # the modal's callback id (its view_submission)
REQUEST_BLOCK = "threadgate_ask_request"
REQUEST_ACTION = "request"
DEFAULT_REQUEST = "Summarize this"
SHORTCUT_NAME = "Ask threadgate"  # what the message menu shows (kept short: Slack cuts it)
SHORTCUT_DESCRIPTION = "Ask threadgate about this message"
# Slack's limits (docs.slack.dev, "Modal views" and "Plain-text input element").
METADATA_LIMIT = 3000
REQUEST_LIMIT = 3000
_PREVIEW = 150  # characters of the message shown in the modal
_FILE_NAME = 80  # characters of each file's name the metadata keeps (at most 20 files)
_SLACK_ID = re.compile(r"[A-Z0-9][A-Za-z0-9_-]{0,63}")


def manifest_shortcut() -> dict[str, str]:
    """The manifest's entry under `features.shortcuts`."""
    return {
        "name": SHORTCUT_NAME,
        "type": "message",
        "callback_id": ASK_SHORTCUT,
        "description": SHORTCUT_DESCRIPTION,
    }


@dataclass(frozen=True, slots=True)
class QuotedMessage:
    """The message a person asks about, as the shortcut's payload gave it: where it is,
    who wrote it (a person's id, or a bot's), its author's workspace, its text (`cut`: only
    its start fitted the modal), and the names of its files."""

    channel: str
    ts: str
    author: str
    text: str
    thread_ts: str | None = None
    author_team: str | None = None
    files: tuple[str, ...] = ()
    cut: bool = False

    @property
    def root(self) -> str:
        """The thread it is in, or opens."""
        return self.thread_ts or self.ts


@dataclass(frozen=True, slots=True)
class ShortcutPress:
    """Someone chose the shortcut on a message: who (and their workspace), the message,
    and the trigger the modal is opened with."""

    user: str
    user_team: str | None
    trigger_id: str
    message: QuotedMessage


@dataclass(frozen=True, slots=True)
class AskSubmission:
    """The modal submitted: its view id (the same on a redelivery), who submitted it,
    what they asked, and the message it carries."""

    view_id: str
    user: str
    user_team: str | None
    request: str
    message: QuotedMessage


class _Person(BaseModel):
    id: SlackId
    team_id: str | None = None


class _Channel(BaseModel):
    id: SlackId


class _Message(BaseModel):
    ts: SlackTs
    text: str = ""
    user: SlackId | None = None
    thread_ts: SlackTs | None = None
    team: str | None = None


class _MessageAction(BaseModel):
    type: str
    callback_id: str
    trigger_id: str
    user: _Person
    channel: _Channel
    message: _Message


class _View(BaseModel):
    id: SlackId
    callback_id: str
    private_metadata: str = ""
    state: dict[str, Any] = {}


class _ViewSubmission(BaseModel):
    type: str
    user: _Person
    view: _View


def shortcut_press(payload: dict[str, Any]) -> ShortcutPress:
    """The press a `message_action` payload carries; `MalformedEvent` if it is not one
    we can read (no message author at all, say)."""
    try:
        action = _MessageAction.model_validate(payload)
    except ValidationError as exc:
        raise MalformedEvent(f"message_action payload: {summary(exc)}") from exc
    raw = payload["message"]
    author = action.message.user or bot_of(raw)
    if author is None:
        raise MalformedEvent("message_action payload: the message names no author")
    message = QuotedMessage(
        channel=action.channel.id,
        ts=action.message.ts,
        author=author,
        text=action.message.text,
        thread_ts=action.message.thread_ts,
        author_team=_team(action.message.team),
        files=tuple((f.name or "a file")[:_FILE_NAME] for f in shared_files(raw.get("files"))),
    )
    return ShortcutPress(action.user.id, _team(action.user.team_id), action.trigger_id, message)


def ask_submission(payload: dict[str, Any]) -> AskSubmission:
    """The request a `view_submission` of our modal carries; `MalformedEvent` if its
    shape, its request or its metadata is not what `ask_modal` made."""
    try:
        submitted = _ViewSubmission.model_validate(payload)
    except ValidationError as exc:
        raise MalformedEvent(f"view_submission payload: {summary(exc)}") from exc
    view = submitted.view
    request = _typed(view.state.get("values"), REQUEST_BLOCK, REQUEST_ACTION, "value")
    if not isinstance(request, str) or not request.strip():
        raise MalformedEvent("view_submission payload: no request was typed")
    message = read_metadata(view.private_metadata)
    return AskSubmission(
        view.id, submitted.user.id, _team(submitted.user.team_id), request, message
    )


def _typed(found: Any, *keys: str) -> Any:
    """`found[k1][k2]…`, None where any level is not an object holding the next key."""
    for key in keys:
        found = found.get(key) if isinstance(found, dict) else None
    return found


def _team(value: str | None) -> str | None:
    """A workspace id; only data, so a value that is not a Slack id is left out."""
    return value if value is not None and _SLACK_ID.fullmatch(value) else None


def write_metadata(message: QuotedMessage) -> str:
    """The message as the modal's `private_metadata`, its text cut to fit Slack's limit."""
    text = message.text
    encoded = _encode(message)
    while len(encoded) > METADATA_LIMIT:
        over = len(encoded) - METADATA_LIMIT
        text = text[: max(0, len(text) - max(over, 1))]
        encoded = _encode(replace(message, text=text, cut=True))
    return encoded


def _encode(message: QuotedMessage) -> str:
    fields = {
        "c": message.channel,
        "ts": message.ts,
        "th": message.thread_ts,
        "a": message.author,
        "at": message.author_team,
        "f": list(message.files),
        "cut": message.cut,
        "t": message.text,
    }
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


class _Metadata(BaseModel):
    c: SlackId
    ts: SlackTs
    th: SlackTs | None = None
    a: SlackId
    at: SlackId | None = None
    f: list[str] = []
    cut: bool = False
    t: str = ""


def read_metadata(text: str) -> QuotedMessage:
    """The message `write_metadata` put in a modal; `MalformedEvent` for anything else."""
    try:
        found = _Metadata.model_validate_json(text)
    except ValidationError as exc:
        raise MalformedEvent(f"view_submission private_metadata: {summary(exc)}") from exc
    return QuotedMessage(
        channel=found.c,
        ts=found.ts,
        author=found.a,
        text=found.t,
        thread_ts=found.th,
        author_team=found.at,
        files=tuple(found.f),
        cut=found.cut,
    )


def ask_modal(message: QuotedMessage) -> dict[str, Any]:
    """The modal the shortcut opens: the start of the message, and what to do with it (a
    prefilled, editable "Summarize this"), the message in its metadata."""
    preview = " ".join(message.text.split())
    if len(preview) > _PREVIEW:
        preview = preview[: _PREVIEW - 1] + "…"
    about = f"About this message: “{preview}”" if preview else "About this message."
    return {
        "type": "modal",
        "callback_id": ASK_VIEW,
        "title": _plain("Ask threadgate"),
        "submit": _plain("Ask"),
        "close": _plain("Cancel"),
        "private_metadata": write_metadata(message),
        "blocks": [
            {"type": "section", "block_id": "threadgate_ask_about", "text": _plain(about)},
            {
                "type": "input",
                "block_id": REQUEST_BLOCK,
                "label": _plain("What should threadgate do with it?"),
                "element": {
                    "type": "plain_text_input",
                    "action_id": REQUEST_ACTION,
                    "multiline": True,
                    "initial_value": DEFAULT_REQUEST,
                    "max_length": REQUEST_LIMIT,
                },
            },
            {
                "type": "context",
                "elements": [_plain("The answer comes in the message's thread, or in your DM.")],
            },
        ],
    }


def refusal_modal(reason: str) -> dict[str, Any]:
    """The modal opened instead, for someone the bot does not answer there: why not."""
    return {
        "type": "modal",
        "title": _plain("Ask threadgate"),
        "close": _plain("Close"),
        "blocks": [{"type": "section", "text": _plain(reason)}],
    }


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": False}
