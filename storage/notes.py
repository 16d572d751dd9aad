"""The host's notes on a stored message, as `messages.notes` holds them.

A note (`agent.RuntimeNote`: a picture not kept, an attachment a provider refused) is kept
beside the message it is about, never in its text (migration 031): `messages.text` of a
person's turn is the turn as the gateway rendered it and nothing else, so an edit
replaces just that, a deletion blanks just that, and the prompt renders the notes after
it in tags of their own (agent/core/notes.py). The column is a JSON list of
`{"source": …, "text": …}`; a deleted turn's note is not stored at all: the row's
`deleted_at` says it (storage/history.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, cast

from agent import NOTE_SOURCES, NoteSource, RuntimeNote

log = logging.getLogger(__name__)


def notes_json(notes: Sequence[RuntimeNote]) -> str | None:
    """Notes as `messages.notes` stores them; None when there are none."""
    if not notes:
        return None
    return json.dumps([{"source": n.source, "text": n.text} for n in notes])


def notes_from_json(stored: str | list[Any] | None) -> tuple[RuntimeNote, ...]:
    """The notes `messages.notes` holds; one of a source this version does not know (a
    newer deployment's, in a rolling deploy) is left out, not guessed at."""
    if not stored:
        return ()
    items = json.loads(stored) if isinstance(stored, str) else stored
    notes = []
    for item in items:
        if item.get("source") in NOTE_SOURCES:
            notes.append(RuntimeNote(cast(NoteSource, item["source"]), str(item.get("text", ""))))
        else:
            log.info("a stored note of unknown source %r is not shown", item.get("source"))
    return tuple(notes)
