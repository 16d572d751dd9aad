"""What `FakeSlack` does for modals: `views.open`, and the payloads of a message shortcut
and of a modal's submission, as Slack's reference writes them.

A test presses a message shortcut on a stored message with
`slack.views.press(channel, ts, user=…)`: the `message_action` payload Slack sends
(docs.slack.dev, "Shortcuts interaction payloads": `callback_id`, `trigger_id`,
`response_url`, `user`, `channel`, `team`, `message_ts` and the whole `message`), whose
trigger this fake issued. The test delivers it (HTTP or Socket Mode); the gateway answers
with `views.open`:

    views.open   needs a `trigger_id` this fake issued, else `invalid_arguments` ("invalid
                 `trigger_id`", the reference's example); a trigger is good for one view
                 (a second `views.open` with it: `exchanged_trigger_id`) and for 3 seconds
                 (`expired_trigger_id`; `expire(trigger_id)` ends one at once; real expiry
                 by time is off unless `trigger_seconds` is given, so no test depends on
                 the machine's speed). The view is checked as the "Modal views" reference
                 says: `type` modal, a `title` (plain_text, at most 24 characters), `close`
                 and `submit` likewise (`submit` required with an `input` block), at most
                 100 blocks, `private_metadata` at most 3,000 characters, `callback_id` at
                 most 255; `section`, `context` and `input` blocks with `plain_text_input`
                 (label at most 2,000 characters, `max_length` 1 to 3,000, an
                 `initial_value` within it). A bad view answers `invalid_arguments` with
                 the reason in `response_metadata.messages`. It answers the view as Slack
                 does: with its `id` (`V…`), `team_id`, `state`, `hash`, `root_view_id`,
                 `app_id` and `bot_id`.

`opened` lists the views opened (`OpenedView`: its id, for whom, the view). The person
submits one with `submit(view_id, text)` (or `values=` for every input): the
`view_submission` payload (its `view` with `id`, `callback_id`, `private_metadata`,
`state.values[block_id][action_id]`), for the test to deliver.

Kept here, not in `slack_api.py`, which only registers the method.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .slack_api import FakeSlack

# Slack's limits (docs.slack.dev, "Modal views", "Input block", "Plain-text input element").
_TITLE = 24
_BLOCKS = 100
_METADATA = 3000
_CALLBACK_ID = 255
_LABEL = 2000
_TEXT = 3000
_INPUT_MAX = 3000


@dataclass(frozen=True, slots=True)
class OpenedView:
    """One successful views.open: the view's id, the person it opened for, the view."""

    id: str
    user: str
    view: Mapping[str, Any]


@dataclass
class _Trigger:
    user: str
    issued: float
    used: bool = False
    expired: bool = False


@dataclass
class FakeViews:
    """Triggers issued, views opened (module docstring)."""

    slack: FakeSlack
    trigger_seconds: float | None = None
    clock: Callable[[], float] = time.monotonic
    opened: list[OpenedView] = field(default_factory=list)
    _triggers: dict[str, _Trigger] = field(default_factory=dict)

    def press(
        self,
        channel: str,
        ts: str,
        *,
        user: str,
        callback_id: str = "threadgate_ask",
        user_team: str | None = None,
    ) -> dict[str, Any]:
        """The `message_action` payload of `user` choosing the shortcut `callback_id` on
        the stored message `ts` of `channel`; its trigger is issued now."""
        message = dict(self.slack.message(channel, ts))
        trigger = self._issue(user)
        team = self.slack.team_id
        return {
            "type": "message_action",
            "token": "verification-token-unused",
            "action_ts": f"{time.time():.6f}",
            "team": {"id": team, "domain": "threadgate-test"},
            "user": {"id": user, "name": user.lower(), "team_id": user_team or team},
            "channel": {"id": channel, "name": channel.lower()},
            "is_enterprise_install": False,
            "enterprise": None,
            "callback_id": callback_id,
            "trigger_id": trigger,
            "message_ts": ts,
            "message": message,
            "response_url": f"https://hooks.slack.com/app/{team}/1/{uuid.uuid4().hex}",
        }

    def submit(
        self, view_id: str, text: str | None = None, *, values: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The `view_submission` payload of the person the view `view_id` opened for,
        having typed `text` into its one input (its initial value when None), or
        `values` by block id."""
        opened = next(v for v in self.opened if v.id == view_id)
        state = {}
        for block in opened.view.get("blocks", []):
            if block.get("type") != "input":
                continue
            element = block["element"]
            typed = (values or {}).get(block["block_id"], text)
            value = element.get("initial_value") if typed is None else typed
            state[block["block_id"]] = {
                element["action_id"]: {"type": element["type"], "value": value}
            }
        team = self.slack.team_id
        return {
            "type": "view_submission",
            "team": {"id": team, "domain": "threadgate-test"},
            "user": {"id": opened.user, "name": opened.user.lower(), "team_id": team},
            "api_app_id": self.slack.app_id,
            "token": "verification-token-unused",
            "trigger_id": self._issue(opened.user),
            "view": {**self._answered(opened), "state": {"values": state}},
            "response_urls": [],
            "is_enterprise_install": False,
            "enterprise": None,
        }

    def expire(self, trigger_id: str) -> None:
        """Let the trigger's 3 seconds be over."""
        self._triggers[trigger_id].expired = True

    def open(self, params: dict[str, Any]) -> dict[str, Any]:
        """views.open (module docstring)."""
        trigger = self._triggers.get(str(params.get("trigger_id") or ""))
        if trigger is None:
            return _invalid("invalid `trigger_id`")
        if trigger.used:
            return {"ok": False, "error": "exchanged_trigger_id"}
        if trigger.expired or (
            self.trigger_seconds is not None
            and self.clock() - trigger.issued > self.trigger_seconds
        ):
            return {"ok": False, "error": "expired_trigger_id"}
        view = params.get("view")
        if isinstance(view, str):
            try:
                view = json.loads(view)
            except ValueError:
                return _invalid("`view` is not JSON")
        problem = view_problem(view)
        if problem is not None:
            return _invalid(problem)
        trigger.used = True
        opened = OpenedView(f"V{uuid.uuid4().hex[:10].upper()}", trigger.user, view)
        self.opened.append(opened)
        return {"ok": True, "view": self._answered(opened)}

    def _issue(self, user: str) -> str:
        trigger = f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}"
        self._triggers[trigger] = _Trigger(user, self.clock())
        return trigger

    def _answered(self, opened: OpenedView) -> dict[str, Any]:
        """The view as Slack gives it back: what was sent, and Slack's own fields."""
        view = dict(opened.view)
        return {
            **view,
            "id": opened.id,
            "team_id": self.slack.team_id,
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "external_id": "",
            "state": {"values": {}},
            "hash": f"{int(time.time())}.{uuid.uuid4().hex[:8]}",
            "clear_on_close": False,
            "notify_on_close": False,
            "previous_view_id": None,
            "root_view_id": opened.id,
            "app_id": self.slack.app_id,
            "app_installed_team_id": self.slack.team_id,
            "bot_id": self.slack.bot_id,
        }


def _invalid(reason: str) -> dict[str, Any]:
    return {
        "ok": False,
        "error": "invalid_arguments",
        "response_metadata": {"messages": [reason]},
    }


def view_problem(view: Any) -> str | None:
    """Why Slack would refuse this modal view, or None."""
    if not isinstance(view, dict) or view.get("type") != "modal":
        return "`view.type` must be modal"
    for key, required in (("title", True), ("close", False), ("submit", False)):
        if (key in view or required) and not _plain(view.get(key), _TITLE):
            return f"`view.{key}` must be plain_text of at most {_TITLE} characters"
    blocks = view.get("blocks")
    if not isinstance(blocks, list) or len(blocks) > _BLOCKS:
        return f"`view.blocks` must be a list of at most {_BLOCKS} blocks"
    if len(str(view.get("private_metadata", ""))) > _METADATA:
        return f"`private_metadata` is over {_METADATA} characters"
    if len(str(view.get("callback_id", ""))) > _CALLBACK_ID:
        return f"`callback_id` is over {_CALLBACK_ID} characters"
    if (
        any(isinstance(b, dict) and b.get("type") == "input" for b in blocks)
        and "submit" not in view
    ):
        return "`view.submit` is required with an input block"
    return next((p for p in map(_block_problem, blocks) if p is not None), None)


def _block_problem(block: Any) -> str | None:
    if not isinstance(block, dict):
        return "a block must be an object"
    kind = block.get("type")
    if kind == "section":
        return None if _text(block.get("text"), _TEXT) else "a section needs a text"
    if kind == "context":
        elements = block.get("elements")
        ok = isinstance(elements, list) and 0 < len(elements) <= 10
        return None if ok and all(_text(e, _TEXT) for e in elements) else "a bad context block"
    if kind == "input":
        if not _plain(block.get("label"), _LABEL):
            return f"an input's label must be plain_text of at most {_LABEL} characters"
        return _input_problem(block.get("element"))
    return f"no block of type {kind!r} here"


def _input_problem(element: Any) -> str | None:
    if not isinstance(element, dict) or element.get("type") != "plain_text_input":
        return "an input here must hold a plain_text_input"
    if not isinstance(element.get("action_id"), str) or len(element["action_id"]) > 255:
        return "a plain_text_input needs an action_id of at most 255 characters"
    most = element.get("max_length", _INPUT_MAX)
    if not isinstance(most, int) or not 1 <= most <= _INPUT_MAX:
        return f"`max_length` must be 1 to {_INPUT_MAX}"
    initial = element.get("initial_value", "")
    if not isinstance(initial, str) or len(initial) > most:
        return "`initial_value` must be a text within `max_length`"
    return None


def _plain(text: Any, most: int) -> bool:
    return isinstance(text, dict) and text.get("type") == "plain_text" and _text(text, most)


def _text(text: Any, most: int) -> bool:
    return (
        isinstance(text, dict)
        and text.get("type") in ("plain_text", "mrkdwn")
        and isinstance(text.get("text"), str)
        and 0 < len(text["text"]) <= most
    )
