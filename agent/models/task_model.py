"""A model as one task's requests reach it: its person named, refused attachments withheld.

`TaskModel` wraps each model the ladder hands a task's attempt (agent/durable/responder.py):

- every request names the task's end user (`ModelRequest.end_user`: the gateway's opaque
  id of the person, when `THREADGATE_SEND_USER_ID` is on), which the wire formats send as
  the vendor's end-user field;
- a request the provider refused because of one picture or document (`AttachmentRefused`
  with scope `attachment`, agent/models/providers/classify.py) is sent again without it,
  the model told in a runtime note that it was not shown and why; the refusal is recorded
  (`AttachmentRefusals`, in Postgres: no later round of any replica sends it again) and
  the attachment is withheld from every later request of the task (this round's next
  steps still carry it in their messages). When the provider did not say which one, all of
  that kind in the request are: a bounded loss, where sending them again would fail every
  later round of the thread. At most one retry per attachment of the request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from agent.core.attachments import AttachmentRefusals, describe, not_shown_note
from agent.core.documents import Document
from agent.core.errors import AttachmentRefused, Route
from agent.core.images import Image
from agent.core.notes import render_notes
from agent.models.contract import (
    Model,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    ToolResultMessage,
    UserMessage,
    Watch,
)
from agent.models.providers.attachment_paths import attachments_of

if TYPE_CHECKING:
    from agent.core.ports import Showing

Attachment = Image | Document
A = TypeVar("A", Image, Document)


@dataclass
class Withheld:
    """The attachments a task's requests no longer carry, with why (shared by the models
    of one task run: a picture one route refused is not sent to the fallback either)."""

    by_key: dict[str, str] = field(default_factory=dict)
    by_identity: dict[int, str] = field(default_factory=dict)  # unstored (a tool's)

    def reason(self, attachment: Attachment) -> str | None:
        if attachment.key:
            return self.by_key.get(attachment.key)
        return self.by_identity.get(id(attachment))

    def add(self, attachment: Attachment, reason: str) -> None:
        if attachment.key:
            self.by_key[attachment.key] = reason
        else:
            self.by_identity[id(attachment)] = reason

    def applied(self, request: ModelRequest) -> ModelRequest:
        """`request` without the withheld attachments, each named in a note."""
        if not self.by_key and not self.by_identity:
            return request
        return replace(request, messages=tuple(self._message(m) for m in request.messages))

    def _message(self, message: ModelMessage) -> ModelMessage:
        if isinstance(message, UserMessage):
            images, notes_i = self._split(message.images, "picture")
            documents, notes_d = self._split(message.documents, "document")
            if not notes_i and not notes_d:
                return message
            return UserMessage(message.text + notes_i + notes_d, images, documents)
        if isinstance(message, ToolResultMessage) and message.images:
            images, notes = self._split(message.images, "picture")
            return (
                replace(message, content=message.content + notes, images=images)
                if notes
                else message
            )
        return message

    def _split(self, items: tuple[A, ...], kind: str) -> tuple[tuple[A, ...], str]:
        kept = tuple(a for a in items if self.reason(a) is None)
        refused = [(a, why) for a in items if (why := self.reason(a)) is not None]
        notes = [
            not_shown_note(
                [describe(kind, a.name, len(a.data))],
                f"the provider refused it: {why}",
                "attachment_refused",
            )
            for a, why in refused
        ]
        return kept, render_notes(n for n in notes if n is not None)


class TaskModel(Model):
    """A model for one task's requests (module docstring)."""

    def __init__(
        self,
        inner: Model,
        *,
        end_user: str | None = None,
        refusals: AttachmentRefusals | None = None,
        withheld: Withheld | None = None,
    ) -> None:
        self.name = inner.name
        self._inner = inner
        self._end_user = end_user
        self._refusals = refusals
        self._withheld = withheld if withheld is not None else Withheld()

    async def request(
        self,
        request: ModelRequest,
        *,
        watch: Watch | None = None,
        showing: Showing | None = None,
    ) -> ModelResponse:
        request = replace(request, end_user=self._end_user or request.end_user)
        tries = len(attachments_of(request)) + 1
        for attempt in range(tries):
            shown = self._withheld.applied(request)
            try:
                return await self._inner.request(shown, watch=watch, showing=showing)
            except AttachmentRefused as refused:
                last = attempt + 1 == tries
                if last or refused.scope != "attachment" or not await self._refuse(refused, shown):
                    raise
        raise AssertionError("unreachable: the last try raises")

    async def _refuse(self, refused: AttachmentRefused, shown: ModelRequest) -> bool:
        """Withhold (and record) what `refused` names; False when nothing is left to."""
        if refused.attachment is not None:
            targets: list[Attachment] = [refused.attachment]
        else:
            kind = Image if refused.kind == "picture" else Document
            targets = [a for a in attachments_of(shown) if isinstance(a, kind)]
        if not targets:
            return False
        for target in targets:
            self._withheld.add(target, refused.reason)
        keys = [t.key for t in targets if t.key]
        if keys and self._refusals is not None:
            await self._refusals.refuse(keys, route=self.route, reason=refused.reason)
        return True

    @property
    def route(self) -> Route:
        route = getattr(self._inner, "route", None)
        if isinstance(route, Route):
            return route
        provider, _, name = self.name.partition(":")
        return Route(provider, name or provider)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        async for event in self._inner.stream(self._withheld.applied(request)):
            yield event

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __getattr__(self, name: str) -> object:
        # Anything else (`capabilities`, `model`, …) is the wrapped model's.
        return getattr(self._inner, name)
