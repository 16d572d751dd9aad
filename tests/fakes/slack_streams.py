"""What `FakeSlack` knows about Slack's native streaming messages: chunk rules and stream state.

chat.startStream / appendStream / stopStream carry their own payload (`markdown_text` or a
list of typed `chunks`) and their own life cycle (streaming, then stopped), which the rest
of the fake knows nothing about; keeping them here keeps `slack_api.py` about HTTP and the
message store. Nothing in this module speaks HTTP: `slack_api.FakeSlack` validates a request
with `check_payload`, keeps one `Stream` per streamed message and hands tests the frozen
`StreamedMessage` / `TaskCard` views.

Chunks (docs.slack.dev "text streaming"; slack-sdk 3.48 `models/messages/chunk.py`):
    {"type": "markdown_text", "text": str}                  appended to the message text
    {"type": "task_update", "id": str, "title": str,
     "status": "pending"|"in_progress"|"complete"|"error",
     "details"?: str, "output"?: str,
     "sources"?: [{"type": "url", "url": str, "text": str}]} a task card, keyed by `id`
    {"type": "plan_update", "title": str}                   the plan's title
    {"type": "blocks", "blocks": [block, …]}                Block Kit inside the stream
Anything else, a missing or mistyped field, an unknown field or status ("completed" is the
classic one), answers `invalid_chunks`. The validation is hand-written: Slack publishes no
schema for chunks, and slack-sdk's chunk classes only warn about unknown keys.

Where Slack documents nothing, the fake picks, and says so here:
- A task card's `title`, `status` and `output` replace the previous ones; `details` is
  appended, as third-party measurements against the live API report.
- The 12,000-character limit applies to each `markdown_text` (argument or chunk) on its own,
  not to the message total (also as measured by others): longer answers `msg_too_long`.
- A stream's mode is fixed by the first call that carries content (`markdown_text` or
  `chunks`); a later call in the other mode answers `streaming_mode_mismatch`, as Slack's
  error list describes. A start with neither (slack-sdk's `chat_stream().stop()` on an
  empty buffer does that) leaves the mode open.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

StreamState = Literal["streaming", "stopped"]
StoppedBy = Literal["app", "user", "expiry", "delete"]
Mode = Literal["markdown", "chunks"]

MAX_MARKDOWN = 12_000
TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
# docs.slack.dev lists timeline and plan; Slack's newer method spec adds dense.
DISPLAY_MODES = frozenset({"timeline", "plan", "dense"})

_TASK_REQUIRED = {"type", "id", "title", "status"}
_TASK_OPTIONAL = {"details", "output", "sources"}


@dataclass(frozen=True, slots=True)
class TaskCard:
    """One task card of a streamed message as it stands, with every status it went through."""

    id: str
    title: str
    status: str
    details: str | None
    output: str | None
    sources: tuple[Mapping[str, Any], ...]
    history: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StreamedMessage:
    """A message made with chat.startStream, as the fake holds it now.

    `text` is all the markdown streamed into it, in order; `chunks` every chunk received
    (markdown ones included); `stopped_by` says who ended the stream: the app
    (chat.stopStream), the user (`FakeSlack.stop_stream_as_user`), the expiry, or a
    chat.delete. A deleted message keeps its view, with `deleted` set."""

    ts: str
    channel: str
    thread_ts: str
    text: str
    chunks: tuple[Mapping[str, Any], ...]
    tasks: Mapping[str, TaskCard]
    plan_title: str | None
    task_display_mode: str
    state: StreamState
    stopped_by: StoppedBy | None
    metadata: Mapping[str, Any] | None
    blocks: tuple[Mapping[str, Any], ...]
    recipient_user_id: str | None
    recipient_team_id: str | None
    deleted: bool


@dataclass(slots=True)
class _Task:
    title: str
    status: str
    details: str | None = None
    output: str | None = None
    sources: list[Mapping[str, Any]] = field(default_factory=list)
    history: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Stream:
    """The mutable state of one streamed message; `message` is its entry in the store."""

    message: dict[str, Any]
    channel: str
    thread_ts: str
    task_display_mode: str
    recipient_user_id: str | None
    recipient_team_id: str | None
    last_write: float
    started: float
    mode: Mode | None = None
    state: StreamState = "streaming"
    stopped_by: StoppedBy | None = None
    text: str = ""
    chunks: list[Mapping[str, Any]] = field(default_factory=list)
    tasks: dict[str, _Task] = field(default_factory=dict)
    plan_title: str | None = None
    deleted: bool = False

    def write(self, payload: Mapping[str, Any], now: float) -> None:
        """Apply a checked payload (`check_payload` said None): text, chunks, cards, plan."""
        if payload.get("markdown_text"):
            self.mode = self.mode or "markdown"
            self.text += str(payload["markdown_text"])
        if payload.get("chunks"):
            self.mode = self.mode or "chunks"
            for chunk in payload["chunks"]:
                self._apply(chunk)
        self.message["text"] = self.text
        self.last_write = now

    def stop(self, by: StoppedBy) -> None:
        self.state, self.stopped_by = "stopped", by

    def mode_of(self, payload: Mapping[str, Any]) -> Mode | None:
        """The mode a payload would lock the stream into, or None when it carries nothing."""
        if payload.get("markdown_text"):
            return "markdown"
        return "chunks" if payload.get("chunks") else None

    def view(self) -> StreamedMessage:
        return StreamedMessage(
            ts=str(self.message["ts"]),
            channel=self.channel,
            thread_ts=self.thread_ts,
            text=self.text,
            chunks=tuple(self.chunks),
            tasks={task_id: _card(task_id, task) for task_id, task in self.tasks.items()},
            plan_title=self.plan_title,
            task_display_mode=self.task_display_mode,
            state=self.state,
            stopped_by=self.stopped_by,
            metadata=self.message.get("metadata"),
            blocks=tuple(self.message.get("blocks") or ()),
            recipient_user_id=self.recipient_user_id,
            recipient_team_id=self.recipient_team_id,
            deleted=self.deleted,
        )

    def _apply(self, chunk: Mapping[str, Any]) -> None:
        self.chunks.append(chunk)
        kind = chunk["type"]
        if kind == "markdown_text":
            self.text += chunk["text"]
        elif kind == "plan_update":
            self.plan_title = chunk["title"]
        elif kind == "task_update":
            self._update_task(chunk)

    def _update_task(self, chunk: Mapping[str, Any]) -> None:
        task = self.tasks.setdefault(chunk["id"], _Task(chunk["title"], chunk["status"]))
        task.title, task.status = chunk["title"], chunk["status"]
        task.history.append(chunk["status"])
        if "details" in chunk:
            task.details = (task.details or "") + chunk["details"]
        if "output" in chunk:
            task.output = chunk["output"]
        task.sources.extend(chunk.get("sources") or ())


def _card(task_id: str, task: _Task) -> TaskCard:
    return TaskCard(
        id=task_id,
        title=task.title,
        status=task.status,
        details=task.details,
        output=task.output,
        sources=tuple(task.sources),
        history=tuple(task.history),
    )


# -- validation ----------------------------------------------------------------------------


def check_payload(params: Mapping[str, Any], *, need_content: bool) -> str | None:
    """Slack's error code for the `markdown_text`/`chunks` of a stream call, or None.

    `need_content` is chat.appendStream's rule: it must carry one of the two."""
    text, chunks = params.get("markdown_text"), params.get("chunks")
    if text and chunks:
        return "cannot_provide_both_markdown_text_and_chunks"
    if need_content and not text and not chunks:
        return "markdown_text_or_chunks_required"
    if text is not None and not isinstance(text, str):
        return "invalid_arguments"
    if isinstance(text, str) and len(text) > MAX_MARKDOWN:
        return "msg_too_long"
    return None if chunks is None else check_chunks(chunks)


def check_chunks(chunks: Any) -> str | None:
    """`invalid_chunks` or `msg_too_long` for a malformed chunk list, else None."""
    if not isinstance(chunks, list) or not all(isinstance(c, dict) for c in chunks):
        return "invalid_chunks"
    for chunk in chunks:
        if not _valid_chunk(chunk):
            return "invalid_chunks"
        if chunk["type"] == "markdown_text" and len(chunk["text"]) > MAX_MARKDOWN:
            return "msg_too_long"
    return None


def _valid_chunk(chunk: Mapping[str, Any]) -> bool:
    kind = chunk.get("type")
    if kind == "markdown_text":
        return set(chunk) == {"type", "text"} and isinstance(chunk["text"], str)
    if kind == "plan_update":
        return set(chunk) == {"type", "title"} and _text(chunk["title"])
    if kind == "blocks":
        # The blocks themselves are checked by FakeSlack, as for chat.postMessage.
        return set(chunk) == {"type", "blocks"} and isinstance(chunk["blocks"], list)
    return kind == "task_update" and _valid_task(chunk)


def _valid_task(chunk: Mapping[str, Any]) -> bool:
    keys = set(chunk)
    if not _TASK_REQUIRED <= keys <= _TASK_REQUIRED | _TASK_OPTIONAL:
        return False
    status = chunk["status"]
    if not (_text(chunk["id"]) and _text(chunk["title"]) and _text(status)):
        return False
    if status not in TASK_STATUSES:
        return False
    if not all(isinstance(chunk.get(k, ""), str) for k in ("details", "output")):
        return False
    sources = chunk.get("sources", [])
    return isinstance(sources, list) and all(_valid_source(s) for s in sources)


def _valid_source(source: Any) -> bool:
    return (
        isinstance(source, dict)
        and source.get("type") == "url"
        and _text(source.get("url"))
        and _text(source.get("text"))
    )


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)
