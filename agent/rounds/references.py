"""Numbered history: what `[ref N]` means in a round.

A delegating model often wants a subtask to see a particular earlier message ("summarise
what Ana posted above"). Copying the text into the call costs output tokens and invites
paraphrase, so the transcript numbers the messages it shows — `[ref 1]` is the oldest —
and a subtask cites them by number. The catalog is built from the same window the model
is shown, so a number means the same message in the prompt and in `resolve`.

Acknowledgments ("Looking into it…") carry nothing worth citing; they are shown without a
number and cannot be cited. A cited message that is not a person's turn (a reply, a
summary) reaches the sub-agent with its turn tags escaped, as the main round was shown it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agent.core.errors import ControlCallError
from agent.core.notes import render_notes
from agent.core.ports import StoredMessage
from agent.core.text import neutralize_turns

_LISTED = 20  # up to this many valid numbers are listed one by one in an error


@dataclass(frozen=True, slots=True)
class ReferenceCatalog:
    """The citable messages of a window; `[ref N]` is `messages[N - 1]`."""

    messages: tuple[StoredMessage, ...] = ()

    @classmethod
    def from_window(cls, window: Iterable[StoredMessage]) -> ReferenceCatalog:
        """Number every message of `window` except acknowledgments, oldest first."""
        return cls(tuple(m for m in window if m.kind != "ack"))

    def number_of(self, message: StoredMessage) -> int | None:
        """The `[ref N]` number of `message`, or None when it is not citable."""
        for number, candidate in enumerate(self.messages, start=1):
            if candidate.id == message.id:
                return number
        return None

    def label(self, message: StoredMessage) -> str:
        """The message's text as the model sees it: `[ref N] ` first when it has a number."""
        number = self.number_of(message)
        return message.text if number is None else f"[ref {number}] {message.text}"

    def resolve(self, numbers: Sequence[int]) -> tuple[str, ...]:
        """The texts of the cited messages, in citation order, each once: a person's turn
        as stored, anything else with its turn tags escaped."""
        unknown = [n for n in numbers if not 1 <= n <= len(self.messages)]
        if unknown:
            raise ControlCallError(self._unknown(unknown))
        return tuple(_cited(self.messages[n - 1]) for n in dict.fromkeys(numbers))

    def _unknown(self, numbers: Sequence[int]) -> str:
        cited = ", ".join(f"[ref {n}]" for n in dict.fromkeys(numbers))
        return f"{cited} does not exist in this conversation; {self.valid_numbers()}."

    def valid_numbers(self) -> str:
        """The numbers the model may cite, said for the model."""
        count = len(self.messages)
        if count == 0:
            return "no message can be cited here, so leave `refs` out"
        if count <= _LISTED:
            return "the valid numbers are " + ", ".join(map(str, range(1, count + 1)))
        return f"the valid numbers are 1 to {count}"


def _cited(message: StoredMessage) -> str:
    """A message as a sub-agent reads it: a turn as stored, anything else with its tags
    escaped; the host's notes on it after it (agent/core/notes.py)."""
    text = message.text if message.kind == "turn" else neutralize_turns(message.text)
    return text + render_notes(message.notes)
