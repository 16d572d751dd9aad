"""Slack's thread and channel reads, paced for every replica (issue 43, item 2).

Since 2025 Slack limits `conversations.replies` and `conversations.history` for apps
distributed outside its Marketplace to one call a minute per method per workspace, at most
15 messages a page (the methods' reference pages; existing installations since 2026-03-03);
internal apps and Marketplace apps keep Tier 3 (about 50 a minute). A gateway that reads
as it pleases gets `ratelimited`, and every replica retrying makes it worse. So every read
page asks `ReadPacing` first:

- `take` takes the next call of the method in the workspace from the budget every replica
  shares (storage/slack_reads.py: a row per workspace and method holding when the next
  call may be made, moved on by one conditional upsert). It waits for its turn at most
  until the caller's deadline — before an ack, the look-ups' deadline
  (THREADGATE_LOOKUP_BUDGET_SECONDS) — and otherwise says no: the read is `deferred`, and
  the caller goes on without it and says so (gateway/inbound/context.py).
- A `ratelimited` answer (HTTP 429) pushes the shared budget to Slack's Retry-After, so
  no replica asks before then; the call is not retried (gateway/slack/client.py leaves
  these methods' 429 to us), the read is `rate_limited`.
- Pages are read one after another, never in parallel (gateway/slack/threads.py), each
  taking its own call.

The tier (THREADGATE_SLACK_READ_TIER): `internal` paces to Tier 3, `limited` to one call a
minute and 15 messages a page, `auto` (the default) starts as `internal` and finds the
limited tier from a page Slack capped at 15 messages with more to read, or from a
`ratelimited` answer, and remembers it per workspace in Postgres (`slack_read_tiers`),
for every replica and restart. Counted in `threadgate_slack_reads_total{method,outcome}`
and shown by `threadgate_slack_read_tier{workspace,tier}` and `doctor`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from storage import (
    Database,
    ReadTier,
    found_read_tier,
    push_read,
    read_tier_of,
    take_read,
)

log = logging.getLogger(__name__)

TierSetting: TypeAlias = Literal["auto", "internal", "limited"]
ReadOutcome: TypeAlias = Literal["read", "deferred", "rate_limited", "failed"]

# Messages per page in the limited tier (Slack's maximum and default there), and what we
# ask for otherwise (Slack's recommended page size for these methods).
LIMITED_PAGE = 15
FULL_PAGE = 200
# Seconds between two calls of one method in one workspace, per tier: Tier 3 is "50+ per
# minute"; the limited tier one per minute.
INTERVALS: dict[ReadTier, float] = {"internal": 60 / 50, "limited": 60.0}
# How long a read with no deadline of its own (a tool's, a schedule's) waits for its turn.
DEFAULT_WAIT_SECONDS = 10.0
# A look again at the budget when another replica's call was being taken at that moment.
_AGAIN = 0.05


def _ignore_read(method: str, outcome: ReadOutcome) -> None:
    """Nothing counts."""


def _ignore_tier(team: str, tier: ReadTier) -> None:
    """Nothing shows it."""


@dataclass(frozen=True)
class ReadPacing:
    """The process's pacing of Slack reads, in every workspace (module docstring)."""

    db: Database
    tier: TierSetting = "auto"
    on_read: Callable[[str, ReadOutcome], None] = _ignore_read
    on_tier: Callable[[str, ReadTier], None] = _ignore_tier
    _found: dict[str, ReadTier] = field(default_factory=dict)

    async def tier_of(self, team: str) -> ReadTier:
        """The tier `team`'s workspace reads in: as configured, or as found (auto)."""
        if self.tier != "auto":
            return self.tier
        if (known := self._found.get(team)) == "limited":
            return known
        found = await read_tier_of(self.db, team) or "internal"
        self._remember(team, found)
        return found

    async def page_size(self, team: str) -> int:
        return LIMITED_PAGE if await self.tier_of(team) == "limited" else FULL_PAGE

    async def take(self, team: str, method: str, deadline: float | None) -> bool:
        """Take the next call of `method` in `team`'s workspace, waiting for its turn until
        `deadline` (event-loop time; None: `DEFAULT_WAIT_SECONDS`); False: deferred."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEFAULT_WAIT_SECONDS if deadline is None else deadline
        interval = INTERVALS[await self.tier_of(team)]
        while True:
            taken = await take_read(self.db, team, method, interval)
            if taken.taken:
                return True
            wait = max(taken.wait, _AGAIN)
            if loop.time() + wait >= deadline:
                self.on_read(method, "deferred")
                return False
            await asyncio.sleep(wait)  # pacing to the shared budget, not a synchronization

    async def ratelimited(self, team: str, method: str, retry_after: float | None) -> None:
        """Slack answered `ratelimited`: no replica asks before its Retry-After (a minute
        when it did not say), and with `auto` the workspace is in the limited tier."""
        seconds = retry_after if retry_after is not None else INTERVALS["limited"]
        await push_read(self.db, team, method, seconds)
        self.on_read(method, "rate_limited")
        await self.found(team, "limited", f"{method} answered ratelimited")

    async def page_read(
        self, team: str, method: str, *, asked: int, got: int, has_more: bool
    ) -> None:
        """A page came back: counted; with `auto`, a page capped at the limited tier's 15
        messages (fewer than asked) with more to read shows that tier, and the call just
        made holds the method for the tier's minute (the budget taken was Tier 3's)."""
        self.on_read(method, "read")
        if has_more and got <= LIMITED_PAGE < asked and self.tier == "auto":
            await push_read(self.db, team, method, INTERVALS["limited"])
            await self.found(team, "limited", f"{method} gave {got} of {asked} with more")

    async def found(self, team: str, tier: ReadTier, evidence: str) -> None:
        if self.tier != "auto" or self._found.get(team) == tier:
            return
        if await found_read_tier(self.db, team, tier, evidence):
            log.warning("Slack reads of workspace %s are in the %s tier: %s", team, tier, evidence)
        self._remember(team, tier)

    def _remember(self, team: str, tier: ReadTier) -> None:
        if self._found.get(team) != tier:
            self._found[team] = tier
            self.on_tier(team, tier)
