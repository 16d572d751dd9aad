"""A model as one task's requests reach it: its person named, refused attachments withheld.

`TaskModel` wraps each model the ladder hands a task's attempt (agent/durable/responder.py):

- every request names the task's end user (`ModelRequest.end_user`: the gateway's opaque
  id of the person, when `THREADGATE_SEND_USER_ID` is on), which the wire formats send as
  the vendor's end-user field;
- a request the provider refused because of one picture or document (`AttachmentRefused`
  with scope `attachment`, agent/models/providers/classify.py) is sent again without it,
  the model told in a runtime note that it was not shown and why. At most one retry per
  attachment of the request.

Which attachment it was decides how far it is withheld (`Withheld`, one per task: every
round, step, subtask and route of the task shares it):

- the provider said which (Anthropic's path, OpenAI's `param`), or only one attachment
  of the request could have caused it: it is withheld from every later request of the
  task, and a stored one is marked refused (`AttachmentRefusals`, in Postgres: no later
  window of any replica carries it; its bytes stay in the history, as the turn's do). A
  tool's picture is not stored: it is known by its bytes' digest, so the same picture
  returned by a later call, step or round of the task is withheld too;
- the provider did not say, and several could have: those are withheld from that route
  only, for the rest of the task, and none is marked — a fallback route may well take
  them, and a refusal nobody can pin on one picture is no reason to lose it for good.
  Which could have: the attachments of the refused kind that route has not already
  answered with in this task (a picture it took before is not what it now refuses).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
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

# How many tasks' `Withheld` a process keeps (`WithheldByTask`): each holds a few short
# strings, and a task whose entry was dropped at worst sends a refused picture once more.
TASKS_KEPT = 1_000


def identity(attachment: Attachment) -> str:
    """What names an attachment across requests: its stored key, or — a tool's, not
    stored — the digest of its bytes (the same picture returned again is the same one)."""
    if attachment.key:
        return attachment.key
    return "sha256:" + hashlib.sha256(attachment.data).hexdigest()


@dataclass
class Withheld:
    """The attachments a task's requests no longer carry, with why (module docstring):
    from every route, or from one route only; and what each route answered with."""

    everywhere: dict[str, str] = field(default_factory=dict)
    by_route: dict[Route, dict[str, str]] = field(default_factory=dict)
    accepted: dict[Route, set[str]] = field(default_factory=dict)

    def reason(self, attachment: Attachment, route: Route) -> str | None:
        name = identity(attachment)
        return self.everywhere.get(name) or self.by_route.get(route, {}).get(name)

    def add(self, attachment: Attachment, reason: str) -> None:
        """Withhold `attachment` from every route of the task."""
        self.everywhere[identity(attachment)] = f"the provider refused it: {reason}"

    def add_for_route(self, route: Route, attachments: Sequence[Attachment], reason: str) -> None:
        """Withhold `attachments` from `route` only: one of them was refused, which is not
        known."""
        why = f"the provider refused one of these and did not say which: {reason}"
        withheld = self.by_route.setdefault(route, {})
        withheld.update(dict.fromkeys(map(identity, attachments), why))

    def accept(self, route: Route, request: ModelRequest) -> None:
        """`route` answered `request`: none of its attachments is what it would refuse."""
        if shown := attachments_of(request):
            self.accepted.setdefault(route, set()).update(map(identity, shown))

    def suspects(self, route: Route, request: ModelRequest, kind: type) -> list[Attachment]:
        """The attachments of `request` of `kind` that `route` has not answered with."""
        taken = self.accepted.get(route, set())
        return [
            a for a in attachments_of(request) if isinstance(a, kind) and identity(a) not in taken
        ]

    def applied(self, request: ModelRequest, route: Route) -> ModelRequest:
        """`request` without the attachments withheld from `route`, each named in a note."""
        if not self.everywhere and not self.by_route.get(route):
            return request
        messages = tuple(self._message(m, route) for m in request.messages)
        return replace(request, messages=messages)

    def _message(self, message: ModelMessage, route: Route) -> ModelMessage:
        if isinstance(message, UserMessage):
            images, notes_i = self._split(message.images, "picture", route)
            documents, notes_d = self._split(message.documents, "document", route)
            if not notes_i and not notes_d:
                return message
            return UserMessage(message.text + notes_i + notes_d, images, documents)
        if isinstance(message, ToolResultMessage) and (message.images or message.documents):
            images, notes_i = self._split(message.images, "picture", route)
            documents, notes_d = self._split(message.documents, "document", route)
            if not notes_i and not notes_d:
                return message
            content = message.content + notes_i + notes_d
            return replace(message, content=content, images=images, documents=documents)
        return message

    def _split(self, items: tuple[A, ...], kind: str, route: Route) -> tuple[tuple[A, ...], str]:
        kept: list[A] = []
        by_reason: dict[str, list[str]] = {}
        for item in items:
            if (why := self.reason(item, route)) is None:
                kept.append(item)
            else:
                by_reason.setdefault(why, []).append(describe(kind, item.name, len(item.data)))
        notes = [
            not_shown_note(described, why, "attachment_refused")
            for why, described in by_reason.items()
        ]
        return tuple(kept), render_notes(n for n in notes if n is not None)


class WithheldByTask:
    """Each task's `Withheld`, for the rounds and subtasks of the task this process runs
    (the newest `TASKS_KEPT` tasks: an entry is a few strings)."""

    def __init__(self, kept: int = TASKS_KEPT) -> None:
        self._kept = kept
        self._tasks: OrderedDict[str, Withheld] = OrderedDict()

    def of(self, task_id: str) -> Withheld:
        withheld = self._tasks.pop(task_id, None) or Withheld()
        self._tasks[task_id] = withheld
        while len(self._tasks) > self._kept:
            self._tasks.popitem(last=False)
        return withheld


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
        route = self.route
        for attempt in range(tries):
            shown = self._withheld.applied(request, route)
            try:
                answer = await self._inner.request(shown, watch=watch, showing=showing)
            except AttachmentRefused as refused:
                last = attempt + 1 == tries
                if last or refused.scope != "attachment" or not await self._refuse(refused, shown):
                    raise
            else:
                self._withheld.accept(route, shown)
                return answer
        raise AssertionError("unreachable: the last try raises")

    async def _refuse(self, refused: AttachmentRefused, shown: ModelRequest) -> bool:
        """Withhold (and record) what `refused` names, or what could have caused it (the
        module docstring); False when nothing is left to."""
        route = self.route
        if refused.attachment is not None:
            suspects: list[Attachment] = [refused.attachment]
        else:
            kind = Image if refused.kind == "picture" else Document
            suspects = self._withheld.suspects(route, shown, kind)
        if len(suspects) > 1:  # one of them, not known which: from this route, unmarked
            self._withheld.add_for_route(route, suspects, refused.reason)
            return True
        if not suspects:
            return False
        [refused_one] = suspects
        self._withheld.add(refused_one, refused.reason)
        if refused_one.key and self._refusals is not None:
            await self._refusals.refuse([refused_one.key], route=route, reason=refused.reason)
        return True

    @property
    def route(self) -> Route:
        route = getattr(self._inner, "route", None)
        if isinstance(route, Route):
            return route
        provider, _, name = self.name.partition(":")
        return Route(provider, name or provider)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        async for event in self._inner.stream(self._withheld.applied(request, self.route)):
            yield event

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __getattr__(self, name: str) -> object:
        # Anything else (`capabilities`, `model`, …) is the wrapped model's.
        return getattr(self._inner, name)
