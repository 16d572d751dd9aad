"""Runtime notes: what the host tells a model beside the conversation, typed and kept apart.

Besides what people wrote (their turns, in the gateway's `<turn>` tags) and what tools
returned (framed as data), a model reads notes the host adds: a picture was not kept or
not shown and why, a message was deleted by its author, the window starts with pinned
messages, some pins are only listed for room, its last answer was not seen by anyone.
Each is a `RuntimeNote` with a `source` saying which part of the host wrote it, and
reaches the model in a tag of its own, distinct from a turn::

    <runtime source="attachment_refused">Not shown to you (…): the picture "a.png" …</runtime>

Provenance holds for notes as for turns (invariants 2 and 10):

- a note is never written into a person's stored turn: the turn's row keeps the person's
  words only, the notes beside them (`messages.notes`, migration 031) or derived from the
  row (a deleted turn's `DELETED`), and the prompt renders them after the turn;
- nothing a person writes can pass for one: a turn's body has every `<` escaped
  (gateway/text/provenance.py), and in whatever else reaches the model — a summary, our
  own replies, tool and subtask results — the opening bracket of a runtime tag is escaped
  like a turn's (`agent.core.text.neutralize_turns`, `agent.rounds.framing`);
- nothing inside a note can end it or open another tag: its text is sanitized and its
  `&`, `<` and `>` escaped when rendered (a note may quote a file name or the first words
  of a pinned message).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeAlias, get_args

from agent.core.text import NOTE_TAG, sanitize_text

__all__ = ["DELETED", "NOTE_SOURCES", "NoteSource", "RuntimeNote", "render_notes"]

NoteSource: TypeAlias = Literal[
    "attachment_not_kept",  # past a picture budget at admission (storage/pictures.py)
    "attachment_refused",  # a provider refused it (agent/models/task_model.py, storage)
    "attachment_not_shown",  # the model takes none of its kind (agent/models/capabilities.py)
    "asked_about",  # a person asked about the message before it (gateway/inbound/asks.py)
    "channel_context",  # the channel's latest messages shown before a turn (gateway/inbound)
    "context_gap",  # earlier messages of the thread not read yet (gateway/inbound/context.py)
    "message_deleted",  # its author deleted the message (storage/lifecycle.py)
    "pinned_first",  # the window opens with a pinned answer of ours (agent/rounds/prompt.py)
    "pins_listed",  # pins past the window's room, listed (storage/history.py)
    "repair",  # the round's own correction: prose, an answer cut off (agent/rounds/loop.py)
    "steered",  # a message that came in while the round worked (agent/rounds/steering.py)
    "tool_pictures",  # the pictures a tool returned follow (openai_wire.py)
]
NOTE_SOURCES: frozenset[str] = frozenset(get_args(NoteSource))


@dataclass(frozen=True, slots=True)
class RuntimeNote:
    """A note the host adds to what a model reads (module docstring)."""

    source: NoteSource
    text: str

    def rendered(self) -> str:
        """The note as the model reads it: `<runtime source="…">text</runtime>`."""
        body = sanitize_text(self.text).replace("&", "&amp;").replace("<", "&lt;")
        return f'<{NOTE_TAG} source="{self.source}">{body.replace(">", "&gt;")}</{NOTE_TAG}>'


def render_notes(notes: Iterable[RuntimeNote]) -> str:
    """Notes as they follow a message's text: each on a line of its own."""
    return "".join(f"\n{note.rendered()}" for note in notes)


DELETED = RuntimeNote(
    "message_deleted", "A message here was deleted by its author; its text is gone."
)
"""What the model reads where a deleted turn was."""
