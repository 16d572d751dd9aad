"""Edits and deletions of Slack messages, applied to the conversation we keep.

`gateway/inbound/edits.py` reads the events; this module decides what they do:

- An edit of a turn we stored re-renders it exactly as the gatekeeper renders a new turn
  (provenance, Slack markup, names) with an `edited` time in its tag, and replaces the
  stored text (storage/lifecycle.py). Its task is not run again: a turn whose task already
  ran changes history only, so the next answers in the thread read the new text; a turn
  whose task is still queued is answered in its new words. Its files are not fetched
  again: what the stored version says of them (their text, the not-read note) follows
  the new words — found as the stored body after the previous words rendered again; if
  those render differently now (a name changed), the files are described as not read.
- An edit that adds a mention of the bot to a message we never stored (no task) is a new
  request: it goes through the normal admission with the message's own task id, so it is
  answered once — a second edit, or the same event redelivered, admits nothing.
- The copy kept of every message the app receives (storage/seen_messages.py, the store
  context is read from first) follows edits, re-rendered the same way, and is deleted
  with its message; an edit of a message kept only there says `edited`.
- Any other edit (of a message we never kept, of a bot's message) is acked quietly.
- A deletion blanks the stored turn and cancels its task if that has not started
  (storage/lifecycle.py says why a running one is left to finish). Nothing is posted.

Every path is de-duplicated by the event id, as admission is. Channel messages' edits and
deletions reach us with the channel message events (subscribed with
`THREADGATE_CONTINUE_THREADS`, the default); DMs' always.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Literal, TypeAlias

from agent import bind_log_fields, user_message_id
from gateway.inbound.context import earlier_message_id
from gateway.inbound.edits import Deletion, Edit
from gateway.inbound.gatekeeper import Gatekeeper, Outcome
from gateway.slack.threads import slack_time
from gateway.text.markup import mentioned_user_ids
from gateway.text.provenance import TurnParseError, parse_turn
from storage import (
    Database,
    delete_turn,
    forget_seen,
    revise_seen,
    revise_turn,
    stored_turn,
    stored_turn_text,
)

Revision: TypeAlias = Outcome | Literal["edited", "deleted"]


class Revisions:
    def __init__(
        self, db: Database, gatekeeper: Gatekeeper, *, lookup_budget_seconds: float
    ) -> None:
        self._db = db
        self._gatekeeper = gatekeeper
        self._budget = lookup_budget_seconds

    async def apply(self, change: Edit | Deletion, *, bot_user_id: str | None) -> Revision:
        """Apply the edit or deletion (durable when this returns); say what it did."""
        if isinstance(change, Deletion):
            with bind_log_fields(task=change.task_id, event=change.event_id):
                return await self._delete(change)
        with bind_log_fields(task=change.turn.task_id, event=change.event_id):
            return await self._edit(change, bot_user_id)

    async def _edit(self, edit: Edit, bot_user_id: str | None) -> Revision:
        turn = edit.turn
        stored = await stored_turn(self._db, _turn_ids(turn.team, turn.channel, turn.ts))
        if stored is None:
            if _mention_added(edit, bot_user_id):
                return await self._gatekeeper.admit(
                    replace(turn, mentioned=True), bot_user_id=bot_user_id
                )
            return await self._edit_kept(edit, bot_user_id)
        deadline = asyncio.get_running_loop().time() + self._budget
        note = await self._files_note(edit, stored, bot_user_id, deadline)
        text = await self._gatekeeper.render(
            turn, bot_user_id=bot_user_id, deadline=deadline, files_note=note
        )
        assert turn.edited is not None  # set by gateway/inbound/edits.py for every edit
        await revise_seen(self._db, turn.team, turn.channel, turn.ts, text)
        revised = await revise_turn(
            self._db,
            event_id=turn.event_id,
            message_id=stored,
            text=text,
            edited_at=slack_time(turn.edited),
        )
        return "edited" if revised else "duplicate"

    async def _files_note(
        self, edit: Edit, stored: str, bot_user_id: str | None, deadline: float
    ) -> str | None:
        """What the stored version says of the message's files, to keep through the edit
        (its files are not fetched again): the stored body after the previous words,
        rendered again. None when the previous words are unknown or render differently
        now (a name changed): the files are then described as not read."""
        if edit.previous_text is None or not edit.turn.files:
            return None
        stored_text = await stored_turn_text(self._db, stored)
        try:
            body = parse_turn(stored_text or "").body
        except TurnParseError:
            return None
        previous = replace(edit.turn, text=edit.previous_text, files=(), edited=None)
        words = parse_turn(
            await self._gatekeeper.render(previous, bot_user_id=bot_user_id, deadline=deadline)
        ).body
        start = f"{words}\n\n" if words else ""
        return body.removeprefix(start) if body.startswith(start) and body != words else None

    async def _edit_kept(self, edit: Edit, bot_user_id: str | None) -> Revision:
        """An edit of a message kept only as context (storage/seen_messages.py): its kept
        copy rendered again (its files described, not read)."""
        turn = edit.turn
        deadline = asyncio.get_running_loop().time() + self._budget
        text = await self._gatekeeper.render(turn, bot_user_id=bot_user_id, deadline=deadline)
        revised = await revise_seen(self._db, turn.team, turn.channel, turn.ts, text)
        return "edited" if revised else "ignored"

    async def _delete(self, deletion: Deletion) -> Revision:
        kept = await forget_seen(self._db, deletion.team, deletion.channel, deletion.ts)
        deleted = await delete_turn(
            self._db,
            event_id=deletion.event_id,
            message_ids=_turn_ids(deletion.team, deletion.channel, deletion.ts),
            task_id=deletion.task_id,
        )
        if deleted is None:
            return "duplicate"
        return "deleted" if deleted.turns or kept else "ignored"


def _turn_ids(team: str, channel: str, ts: str) -> tuple[str, str]:
    """The ids a person's message may be stored under: as a task's turn, or back-filled."""
    return user_message_id(f"{team}:{channel}:{ts}"), earlier_message_id(team, channel, ts)


def _mention_added(edit: Edit, bot_user_id: str | None) -> bool:
    if bot_user_id is None or bot_user_id not in mentioned_user_ids(edit.turn.text):
        return False
    return edit.previous_text is None or bot_user_id not in mentioned_user_ids(edit.previous_text)
