"""Shows a final reply while the model writes it.

When a round has a `Draft` (the publisher can show text as it is written), every model
step is watched through a `ReplyTap`. The tap follows the step's tool calls by index, and
the `text` argument of its first `final_reply` call is decoded as the fragments arrive
(`agent.models.partial_json`) and appended to the draft. Nothing is shown before the first
character that is not blank (a blank `final_reply` is never shown: the round repairs it),
and blanks are shown only once something follows them: the reply is stored trimmed
(`agent.rounds.control`), so what the draft shows is always the start of it.

What is shown is provisional. Whether the step *is* the reply is known only once it ends
(`agent.rounds.loop.decide`: `delegate` outranks `final_reply`, work runs before a control
call, an answer the output limit cut off is never shown, a call `parse` refuses is
repaired), so the loop discards the draft for every other outcome, and when the attempt
fails. The text published in the end is the parsed reply, not what was streamed: the
publisher reconciles the two (the model may have called `final_reply` twice, and the last
call counts).

Prose outside a control call (`TextDelta`) is never shown.
"""

from __future__ import annotations

from agent.core.ports import Draft
from agent.core.text import storable_text
from agent.models.contract import StreamEvent, ToolCallDelta, ToolCallStart
from agent.models.partial_json import StringFieldDecoder

REPLY_TOOL = "final_reply"
REPLY_FIELD = "text"


class ReplyTap:
    """Feeds one model step's events; appends the reply's text to the draft as it comes."""

    def __init__(self, draft: Draft, *, tool: str = REPLY_TOOL, field: str = REPLY_FIELD) -> None:
        self._draft = draft
        self._tool = tool
        self._field = field
        self._names: dict[int, str] = {}
        # Fragments of a call whose start has not arrived yet (some servers send them first).
        self._early: dict[int, list[str]] = {}
        self._index: int | None = None
        self._decoder = StringFieldDecoder(field)
        self._held = ""  # trailing blanks, shown only once something else follows
        self.shown = False

    async def __call__(self, event: StreamEvent) -> None:
        match event:
            case ToolCallStart(index=index, name=name):
                self._names.setdefault(index, name)
                if self._index is None and name == self._tool:
                    self._index = index
                    for fragment in self._early.pop(index, []):
                        await self._feed(fragment)
            case ToolCallDelta(index=index, arguments=fragment):
                if index == self._index:
                    await self._feed(fragment)
                elif index not in self._names:
                    self._early.setdefault(index, []).append(fragment)
            case _:
                pass

    async def _feed(self, fragment: str) -> None:
        text = self._held + storable_text(self._decoder.feed(fragment))
        body = text.rstrip()
        if not body:  # only blanks so far: held, or dropped before the first text
            self._held = text if self.shown else ""
            return
        self._held = text[len(body) :]
        if not self.shown:
            body = body.lstrip()
            self.shown = True
        await self._draft.append(body)
