"""Which bots the agent answers, and how many of their turns one thread may take.

A bot is answered only where the operator says so (`THREADGATE_ALLOW_BOTS`): `none`, the
default, answers no bot; `mentions` answers any bot that mentions ours; a list of bot ids
(`B…`) answers those bots when they mention ours. A bot's post that does not mention ours
never becomes a turn (gateway/slack/events.py), and our own bot's posts are never
answered, whatever the setting.

A bot that is answered may be another agent that answers back: two of them mentioning
each other would talk for ever, a model call a turn (peers have lost whole API keys to
two bots answering each other). So the loop guard counts bot-authored turns per thread in
Postgres (storage/bot_turns.py), the same count on every replica: at most `turns` are
answered per thread per `window_seconds`. Past that the thread is silent for bots, and
the first turn past the bound raises one operator alert, throttled like every alert per
thread (gateway/delivery/alerts.py; the ingress wires it, as inbound does not import
delivery). People in the thread are answered as ever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal, TypeAlias

from gateway.slack.bot_policy import BotPolicy, LoopGuard
from gateway.slack.events import InboundTurn
from gateway.telemetry import outcomes
from storage import Database, count_bot_turn

log = logging.getLogger(__name__)

BotOutcome: TypeAlias = Literal["answered", "not_allowed", "own", "looping"]
BOT_OUTCOMES: tuple[BotOutcome, ...] = ("answered", "not_allowed", "own", "looping")
# The refusals on-call reads in the log (gateway/telemetry/outcomes.py); our own bot's
# posts are not a refusal.
_REFUSALS = {"not_allowed": "bot_not_allowed", "looping": "bot_loop"}
# (key, text) of an operator alert, sent in the background by whoever wires it.
Alert: TypeAlias = Callable[[str, str], None]

LOOP_ALERT = (
    "Bots kept talking in thread {thread} of channel {channel} (workspace {team}): "
    "{turns} bot-authored turns were answered there in {window}, the most "
    "THREADGATE_BOT_TURNS_PER_THREAD allows, so later ones (this one from bot {bot}) get no "
    "answer until the window is over. If two bots are answering each other, remove one from "
    "the channel or from THREADGATE_ALLOW_BOTS."
)


class BotGate:
    """Whether a bot's mention is answered (module docstring); counted by outcome."""

    def __init__(
        self,
        db: Database,
        policy: BotPolicy,
        guard: LoopGuard,
        *,
        own_bot_id: str | None,
        alert: Alert,
        on_decided: Callable[[BotOutcome], None],
    ) -> None:
        self._db = db
        self._policy = policy
        self._guard = guard
        self._own_bot_id = own_bot_id
        self._alert = alert
        self._on_decided = on_decided

    async def admits(self, inbound: InboundTurn, *, bot_user_id: str | None) -> bool:
        """Whether the bot's turn goes on to admission; the loop guard counts it first."""
        outcome = await self._decide(inbound, bot_user_id)
        self._on_decided(outcome)
        if outcome in _REFUSALS:
            outcomes.refused(_REFUSALS[outcome])
        return outcome == "answered"

    async def _decide(self, inbound: InboundTurn, bot_user_id: str | None) -> BotOutcome:
        bot = inbound.bot_id or ""
        if bot == self._own_bot_id or inbound.user == bot_user_id:
            return "own"
        if not self._policy.allows(bot):
            return "not_allowed"
        thread = f"{inbound.team}:{inbound.channel}:{inbound.reply_thread_ts}"
        turn = await count_bot_turn(
            self._db,
            task_id=inbound.task_id,
            thread=thread,
            bot=bot,
            window_seconds=self._guard.window_seconds,
        )
        if turn.rank <= self._guard.turns:
            return "answered"
        if turn.new and turn.rank == self._guard.turns + 1:
            log.warning("bot loop guard: thread %s is silent for bots (bot %s)", thread, bot)
            self._alert(f"bot-loop:{thread}", self._loop_text(inbound, bot))
        return "looping"

    def _loop_text(self, inbound: InboundTurn, bot: str) -> str:
        minutes = self._guard.window_seconds / 60
        window = f"{minutes:g} minutes" if minutes < 120 else f"{minutes / 60:g} hours"
        return LOOP_ALERT.format(
            thread=inbound.reply_thread_ts,
            channel=inbound.channel,
            team=inbound.team,
            turns=self._guard.turns,
            window=window,
            bot=bot,
        )
