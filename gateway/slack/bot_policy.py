"""Which bots' posts are answered (THREADGATE_ALLOW_BOTS) and the loop guard's bound, as
values: read by the settings (gateway/config) and enforced by the gatekeeper's bot gate
(gateway/inbound/bots.py, whose docstring says why)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_NAMES = ("none", "mentions")
_BOT_ID = re.compile(r"B[A-Z0-9]{2,30}")


@dataclass(frozen=True, slots=True)
class BotPolicy:
    """Which bots' mentions are answered: none, any (`mentions`), or those listed."""

    mode: Literal["none", "mentions", "listed"] = "none"
    bots: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, value: str) -> BotPolicy:
        """`none`, `mentions`, or bot ids separated by commas or spaces; `ValueError` for
        anything else, saying what to write."""
        text = value.strip()
        if text.lower() in _NAMES:
            return cls("none" if text.lower() == "none" else "mentions")
        ids = frozenset(part for part in re.split(r"[\s,]+", text) if part)
        if not ids or not all(_BOT_ID.fullmatch(i) for i in ids):
            raise ValueError("must be none, mentions, or a comma-separated list of bot ids")
        return cls("listed", ids)

    def allows(self, bot_id: str) -> bool:
        return self.mode == "mentions" or (self.mode == "listed" and bot_id in self.bots)

    def describe(self) -> str:
        if self.mode == "listed":
            return f"the mentions of bots {', '.join(sorted(self.bots))}"
        return "every bot's mentions" if self.mode == "mentions" else "no bot"


@dataclass(frozen=True, slots=True)
class LoopGuard:
    """At most `turns` bot-authored turns answered per thread per `window_seconds`."""

    turns: int = 5
    window_seconds: float = 3600.0
