"""Pictures and documents a model was not shown, and the port that remembers refusals.

Two reasons keep an attachment of a person's turn from a model, and the model is told of
each, in a runtime note after the turn (never inside it: only the gateway writes turns;
agent/core/notes.py):

- the model cannot take it (its route declares no vision, or no documents:
  agent/models/capabilities.py): the picture is named, not sent, and a request that would
  have been refused with a 400 is answered;
- a provider refused it (a 400 about that picture: too large, not what its type says).
  Sending it again fails every later request of its thread the same way, so the refusal
  is recorded where every replica reads it (`AttachmentRefusals`, storage/pictures.py):
  the attachment is marked and left out of every later window, and its turn gets the
  note (beside its text, not in it), so later rounds are told it without being sent it.

Names in a note are the sender's text: they are quoted as JSON strings in ASCII with angle
brackets escaped, so no name can end the note or open a tag.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from agent.core.errors import Route
from agent.core.notes import NoteSource, RuntimeNote


class AttachmentRefusals(Protocol):
    """Remembers, durably and for every replica, the attachments a provider refused."""

    async def refuse(self, keys: Sequence[str], *, route: Route, reason: str) -> None:
        """Mark the stored attachments `keys` (`Image.key`, `Document.key`) refused by
        `route`, for `reason` (what the provider said, in a few words): no later window
        carries them, and the turn each belongs to says it was not shown. Marking one that
        is marked already changes nothing."""


def quoted_name(name: str) -> str:
    """A file name as a note shows it: a JSON string in ASCII, angle brackets escaped."""
    return json.dumps(name, ensure_ascii=True).replace("<", "\\u003c").replace(">", "\\u003e")


def not_shown_note(described: Sequence[str], why: str, source: NoteSource) -> RuntimeNote | None:
    """The runtime note for attachments not shown (each `described` by `describe`);
    None when there are none."""
    if not described:
        return None
    return RuntimeNote(source, f"Not shown to you ({why}): {'; '.join(described)}.")


def describe(kind: str, name: str, size: int) -> str:
    """`the picture "a.png" (12,345 bytes)`; `kind` is "picture" or "document"."""
    shown = quoted_name(name) if name else "without a name"
    return f"the {kind} {shown} ({size:,} bytes)"


def attachment_key(message_id: str, ordinal: int) -> str:
    """How a stored attachment is named (`Image.key`, `Document.key`): its message's id and
    its place among the message's attachments."""
    return f"{message_id}#{ordinal}"


def message_of(key: str) -> str | None:
    """The id of the message an attachment key belongs to; None for a key of no message."""
    message_id, _, ordinal = key.rpartition("#")
    return message_id if message_id and ordinal.isdigit() else None
