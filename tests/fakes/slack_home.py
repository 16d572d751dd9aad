"""What `FakeSlack` answers to `views.publish`: a person's App Home view.

As Slack's reference says (docs.slack.dev, views.publish; no scope; Tier 4): arguments
`user_id` (required), `view` (required, a JSON-encoded view object) and `hash` (optional:
the `hash` of the view it replaces, against races). A home view is `{"type": "home",
"blocks": [...]}` with at most 100 blocks (Block Kit's view reference), at most 250 kB
(`view_too_large`). Errors: `not_enabled` (a `home` view while the app's Home tab is off:
`home_enabled = False`), `hash_conflict` (a `hash` that is not the current view's),
`view_too_large`, and `invalid_arguments` for a missing or malformed argument, a view that
is not a home view, or a block this fake cannot accept — Slack says which in
`response_metadata.messages` (`[ERROR] … [json-pointer:/view/…]`), and so does this.
`user_not_found` for a user id the fake does not know (`FakeSlack.add_user`).

The blocks are checked for the kinds a Home view of ours uses: `header` (a `plain_text` of
at most 150 characters), `section` (a `plain_text` or `mrkdwn` text of at most 3,000; an
optional `accessory` button: `plain_text` text of at most 75, `action_id` at most 255,
`value` at most 2,000, `style` primary or danger), `divider`, `context` (1 to 10 text
elements). The answer is `{"ok": true, "view": {...}}` with the view's `id`, `team_id`,
`type`, `blocks` and a fresh `hash`.

`views[user]` is what each person's Home shows now; `publishes` every accepted call, in
order. A Home button's click is `click_home(user, action_id, value)`: the `block_actions`
payload Slack sends from a Home view (its `container` a `view`), for the test to deliver
over HTTP or Socket Mode.

Kept here, not in `slack_api.py`, which only registers the method.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_BLOCKS = 100
MAX_VIEW_BYTES = 250_000


@dataclass(frozen=True, slots=True)
class Published:
    """One accepted views.publish: for whom, the view as Slack stored it, and when."""

    user: str
    view: Mapping[str, Any]
    at: float


class FakeHomeViews:
    """People's Home views, published as Slack publishes them."""

    def __init__(self, users: Mapping[str, Any], team_id: str, app_id: str) -> None:
        self._users = users
        self._team = team_id
        self._app = app_id
        self.home_enabled = True
        self.views: dict[str, dict[str, Any]] = {}
        self.publishes: list[Published] = []
        self._ids = itertools.count(1)

    def publish(self, params: Mapping[str, Any]) -> dict[str, Any]:
        user = params.get("user_id")
        if not isinstance(user, str) or not user:
            return _invalid("missing required field: user_id", "/user_id")
        view, problem = _view(params.get("view"))
        if view is None:
            return _invalid(problem, "/view")
        if len(json.dumps(view).encode()) > MAX_VIEW_BYTES:
            return {"ok": False, "error": "view_too_large"}
        if user not in self._users:
            return {"ok": False, "error": "user_not_found"}
        if not self.home_enabled:
            return {"ok": False, "error": "not_enabled"}
        given, current = params.get("hash"), self.views.get(user)
        if given is not None and (current is None or given != current["hash"]):
            return {"ok": False, "error": "hash_conflict"}
        stored = {
            "id": f"V{next(self._ids):08d}",
            "team_id": self._team,
            "app_id": self._app,
            "type": "home",
            "blocks": view["blocks"],
            "hash": f"{int(time.time())}.{secrets.token_hex(4)}",
        }
        self.views[user] = stored
        self.publishes.append(Published(user, stored, time.monotonic()))
        return {"ok": True, "view": stored}

    def shown(self, user: str) -> str:
        """The text of every block of `user`'s Home now, joined by newlines."""
        view = self.views.get(user)
        return "" if view is None else "\n".join(_texts(view["blocks"]))

    def buttons(self, user: str) -> list[tuple[str, str]]:
        """(action_id, value) of every button on `user`'s Home now."""
        view = self.views.get(user) or {"blocks": []}
        found = [b.get("accessory") for b in view["blocks"]]
        return [(a["action_id"], a["value"]) for a in found if isinstance(a, dict)]

    def click_home(self, user: str, action_id: str, value: str) -> dict[str, Any]:
        """The `block_actions` payload of `user` clicking a button of their Home view."""
        view = self.views[user]
        if (action_id, value) not in self.buttons(user):
            raise AssertionError(f"no button {action_id}={value} on {user}'s Home")
        return {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "team_id": self._team},
            "api_app_id": self._app,
            "token": "verification-token-unused",
            "container": {"type": "view", "view_id": view["id"]},
            "trigger_id": f"{int(time.time())}.{secrets.randbelow(10**9)}.{secrets.token_hex(8)}",
            "team": {"id": self._team, "domain": "threadgate-test"},
            "enterprise": None,
            "is_enterprise_install": False,
            "view": view,
            "actions": [
                {
                    "type": "button",
                    "action_id": action_id,
                    "block_id": secrets.token_hex(3),
                    "text": {"type": "plain_text", "text": "Button"},
                    "value": value,
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }


def _invalid(message: str, pointer: str) -> dict[str, Any]:
    return {
        "ok": False,
        "error": "invalid_arguments",
        "response_metadata": {"messages": [f"[ERROR] {message} [json-pointer:{pointer}]"]},
    }


def _view(raw: Any) -> tuple[dict[str, Any] | None, str]:
    """The view given, or why it is not one."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None, "view must be a JSON object"
    if not isinstance(raw, dict):
        return None, "missing required field: view"
    if raw.get("type") != "home":
        return None, "view type must be home for views.publish"
    blocks = raw.get("blocks")
    if not isinstance(blocks, list) or not 0 < len(blocks) <= MAX_BLOCKS:
        return None, f"blocks must hold 1 to {MAX_BLOCKS} items"
    for index, block in enumerate(blocks):
        if not isinstance(block, dict) or not _valid_block(block):
            return None, f"invalid block at /view/blocks/{index}"
    return raw, ""


def _valid_block(block: Mapping[str, Any]) -> bool:
    kind = block.get("type")
    if kind == "header":
        return _text(block.get("text"), 150, ("plain_text",))
    if kind == "divider":
        return True
    if kind == "context":
        elements = block.get("elements")
        return isinstance(elements, list) and 0 < len(elements) <= 10
    if kind == "section":
        accessory = block.get("accessory")
        return _text(block.get("text"), 3000, ("plain_text", "mrkdwn")) and (
            accessory is None or _valid_button(accessory)
        )
    return False


def _valid_button(button: Any) -> bool:
    return (
        isinstance(button, dict)
        and button.get("type") == "button"
        and _text(button.get("text"), 75, ("plain_text",))
        and _short(button.get("action_id"), 255)
        and _short(button.get("value"), 2000)
        and button.get("style") in (None, "primary", "danger")
    )


def _text(text: Any, limit: int, kinds: tuple[str, ...]) -> bool:
    return isinstance(text, dict) and text.get("type") in kinds and _short(text.get("text"), limit)


def _short(value: Any, limit: int) -> bool:
    return isinstance(value, str) and 0 < len(value) <= limit


def _texts(blocks: list[dict[str, Any]]) -> list[str]:
    found = []
    for block in blocks:
        text = block.get("text")
        if isinstance(text, dict):
            found.append(str(text.get("text", "")))
        for element in block.get("elements", []) if block.get("type") == "context" else []:
            found.append(str(element.get("text", "")))
    return found
