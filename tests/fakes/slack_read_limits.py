"""Slack's read limits for distributed apps, as `FakeSlack` applies them (`slack.reads`).

Slack's reference for `conversations.replies` and `conversations.history` (docs.slack.dev,
"Rate limits" and each method's page): for commercially distributed apps not in the
Marketplace, each method is "rate limited to 1 request per minute" per workspace, and
"the maximum and default values for the limit parameter have both been reduced to 15";
a call over a limit is answered HTTP 429 with a `Retry-After` header and
`{"ok": false, "error": "ratelimited"}`. Internal and Marketplace apps keep Tier 3, which
the fake does not limit (the default here).

`limited = True` turns the limited tier on: per method and per workspace (the token that
calls: each installation has its own), the first call of each minute is answered — its
page at most 15 messages, with `has_more` and a `next_cursor` when there are more — and
every other call that minute is answered 429 with `Retry-After: 60` (the figure the issue
that asked for this fake names). The minute is the fake's own clock, which a test moves on
with `advance(seconds)` instead of waiting; `answered` and `refused` record each call.
Kept here, not in `slack_api.py`, which only asks it before each read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

LIMITED_METHODS = frozenset({"conversations.replies", "conversations.history"})
LIMITED_PAGE = 15
MINUTE = 60.0
RETRY_AFTER = 60


@dataclass
class ReadLimits:
    """The read tier the fake answers in (module docstring)."""

    limited: bool = False
    clock: Callable[[], float] = time.monotonic
    offset: float = 0.0
    # (method, token) → when the current minute's call was answered, on the fake's clock.
    _windows: dict[tuple[str, str], float] = field(default_factory=dict)
    answered: list[tuple[str, float]] = field(default_factory=list)
    refused: list[tuple[str, float]] = field(default_factory=list)

    def now(self) -> float:
        return self.clock() + self.offset

    def advance(self, seconds: float) -> None:
        """Move the fake's minute on, as if `seconds` had passed."""
        self.offset += seconds

    def retry_after(self, method: str, token: str | None) -> int | None:
        """Before a call of `method`: None when it is answered (and it opens the minute),
        else the Retry-After of its 429."""
        if not self.limited or method not in LIMITED_METHODS:
            return None
        key, now = (method, token or ""), self.now()
        opened = self._windows.get(key)
        if opened is not None and now - opened < MINUTE:
            self.refused.append((method, now))
            return RETRY_AFTER
        self._windows[key] = now
        self.answered.append((method, now))
        return None

    def capped(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments as the limited tier reads them: `limit` at most 15, and 15
        when not given."""
        if not self.limited or method not in LIMITED_METHODS:
            return params
        try:
            asked = int(params.get("limit") or LIMITED_PAGE)
        except ValueError:
            asked = LIMITED_PAGE
        return params | {"limit": str(max(1, min(asked, LIMITED_PAGE)))}
