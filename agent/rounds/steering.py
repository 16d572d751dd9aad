"""Steering: a round takes the thread's new messages before its next model call.

Under the `steer` queue mode (THREADGATE_THREAD_QUEUE, storage/thread_queue.py) a person
who adds to their question while the bot works should not have to wait for a second
answer: before each model call that follows a work step, the round asks its `Steering`
port for the messages queued behind its task. The store covers them under the round's
lease — each is answered by this task's reply from then on, exactly once — and the
round adds their turns to the conversation, each followed by a runtime note saying it
came in while the work went on. A message that arrives after the round's last model call
is not taken: the next task answers it.

What was taken is kept for the whole round (`Steer`): an attempt the ladder repeats on
another model slot starts with the taken turns too (they are covered: no other answer
will come), and a paused round leaves them out of what it stores, since its next run
reads them from its window like every covered turn. The reply says which turns it took, so it is anchored after them in the history (`Reply.steered`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from agent.core.notes import RuntimeNote, render_notes
from agent.core.ports import StoredMessage, Task
from agent.models.contract import ModelMessage, UserMessage

STEERED = RuntimeNote(
    "steered",
    "This message came in while you were working on the conversation above; "
    "take it into account in your answer.",
)


class Steering(Protocol):
    """The store's side: cover the messages queued behind a running task."""

    async def take(self, task: Task) -> Sequence[StoredMessage]:
        """Cover the thread's messages queued behind `task` (its lease must hold) and
        return their turns, oldest first; none when there are none or the lease is gone."""


class Steer:
    """One round's steering: the turns it took, as the model reads them."""

    def __init__(self, take: Callable[[], Awaitable[Sequence[StoredMessage]]]) -> None:
        self._take = take
        self._taken: list[StoredMessage] = []
        self._messages: list[ModelMessage] = []

    async def new_turns(self) -> list[ModelMessage]:
        """The messages queued since the last look, taken, as turns of the conversation."""
        found: list[ModelMessage] = [steered_turn(m) for m in await self._take_new()]
        self._messages.extend(found)
        return found

    async def _take_new(self) -> Sequence[StoredMessage]:
        taken = await self._take()
        self._taken.extend(taken)
        return taken

    @property
    def turns(self) -> tuple[ModelMessage, ...]:
        """Every turn taken so far (an attempt repeated on another slot starts with them)."""
        return tuple(self._messages)

    def took(self, message: ModelMessage) -> bool:
        """Whether `message` is one of the taken turns (a paused round leaves them out)."""
        return any(message is m for m in self._messages)

    @property
    def taken(self) -> tuple[str, ...]:
        """The ids of the turns taken, oldest first (the reply answers them too)."""
        return tuple(m.id for m in self._taken)


def steered_turn(message: StoredMessage) -> UserMessage:
    """A taken turn as the model reads it: the person's stored turn, its notes, then the
    note that it came in while the round worked."""
    return UserMessage(message.text + render_notes((*message.notes, STEERED)))
