"""From a conversation window to the text of the answer.

The responder renders the window as model messages, then lets the attempt ladder run a
round on each model slot in turn (retrying what is transient, falling back on what is
not, stopping on a refused credential). What comes out is the text of `final_reply`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from agent.control import ControlTool, FinalReply
from agent.model import Model
from agent.ports import StoredMessage
from agent.prompt import transcript
from agent.rounds import DEFAULT_ROUND, RoundSettings, run_round

T = TypeVar("T")


class Attempts(Protocol):
    """Runs an attempt on model slots until one succeeds (the attempt ladder)."""

    async def run(self, attempt: Callable[[Model], Awaitable[T]]) -> T: ...


class Responder:
    def __init__(self, attempts: Attempts, settings: RoundSettings = DEFAULT_ROUND) -> None:
        self._attempts = attempts
        self._settings = settings
        self._controls: tuple[ControlTool, ...] = (FinalReply(),)

    async def __call__(self, window: Sequence[StoredMessage]) -> str:
        messages = transcript(window)

        async def attempt(model: Model) -> str:
            decision = await run_round(model, messages, self._controls, self._settings)
            return decision.text

        return await self._attempts.run(attempt)
