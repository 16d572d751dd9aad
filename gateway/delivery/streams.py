"""Replies that appear while the model writes them, and acknowledgments whose subtasks
show as live task cards: Slack's streaming messages, exactly once.

Slack streams a message with three calls: `chat.startStream` (it shows at once; the answer
is its `ts`), `chat.appendStream` (markdown text, or chunks: `task_update` cards and a
`plan_update` title), `chat.stopStream` (it is complete; our metadata goes on it). We call
them directly rather than through slack_sdk's `chat_stream` helper: the helper flushes by
size only, where the first words must show at once and later ones at a bounded rate, and
its `ts` appears only after the first flush, where the outbox must record it the moment
Slack returns it.

**A draft** (`SlackDraft`, the agent's `Draft`) is one reply being written. A background
flusher sends its text: the first settled text starts the stream at once, later text goes
in one `appendStream` per `interval` at most (Slack rate-limits the method), and no
message takes more than
`BLOCK_LIMIT` characters — the rest of a long reply waits for the publish, which posts
it as the reply's next parts. Text is rendered (`gateway.text.live_render`) when it can be
sent: as it arrives while the flusher waits for text, else kept raw until the flusher's
next send. A model streams a delta every few characters, and rendering each one on
arrival cost more CPU than reading it (bench/first_text.py's profile); what is sent is
the same either way. Starting a stream claims the reply's outbox row (fenced by
the task's lease, like any post); the row turns 'open' with the `ts` as soon as Slack
answers. The agent may `discard` a draft (the step was not the reply): the message is
deleted, then the row released.

**Completing** is the post's job (gateway/delivery/posts.py), through the outbox:
publishing a message whose row is open finishes the message at that `ts` — `stopStream`
with our metadata when what was streamed is exactly the final rendering, else
`stopStream` and `chat.update` to the final rendering — whoever publishes it: the process
that streamed it, or another that took the task over after a crash (the dead process's
half-written message becomes the whole answer; never a second message beside it). A
stream whose `ts` was never recorded (the process died inside `startStream`) is found in
the thread by the post's search (gateway/delivery/reconcile.py) — our bot user's message
without our metadata, posted since the row was claimed, that no other row accounts for —
and completed the same way.

**Refusals.** Slack may refuse a stream (a workspace or a conversation type without the
feature, a missing recipient): the draft then stays silent and the reply is posted as
without streaming; the refusal is remembered for the conversation for `refusal_seconds`.
Every failure here is display: a draft never fails a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from agent import Showing, Step, StepState, Task, stop_task
from gateway.slack.address import SlackAddress
from gateway.slack.errors import SlackError, SlackOutcomeUnknown, SlackRefused, slack_deadline
from gateway.slack.workspaces import SlackClients
from gateway.text.live_render import LiveRenderer
from gateway.text.rendering import BLOCK_LIMIT, render_label
from storage import Outbox, StorageError

log = logging.getLogger(__name__)

# Slack's answers that mean "a stream cannot go here"; anything else refused outright is
# taken the same way for this draft, but not remembered.
_NOT_HERE = frozenset(
    {
        "feature_not_enabled",
        "not_allowed",
        "method_not_supported_for_channel_type",
        "channel_type_not_supported",
        "missing_recipient_user_id",
        "missing_recipient_team_id",
        "invalid_recipient",
        "missing_scope",
        "not_in_channel",
        "unknown_method",
    }
)


StreamEnded = Callable[[str, str], None]
"""Told how each streamed message ended: kind (reply, plan), outcome (completed, replaced,
taken_back, refused); for metrics."""


def _unobserved(kind: str, outcome: str) -> None:
    pass


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """How streams are sent: at most one append per `interval_seconds`; a conversation
    that refused a stream is not offered one again for `refusal_seconds`."""

    interval_seconds: float = 1.0
    refusal_seconds: float = 600.0


def task_update(step: Step) -> dict[str, Any]:
    """A step as Slack's `task_update` chunk (one card of the message's plan). Its title
    and details are the model's words (a subtask's instructions): rendered like a post,
    they cannot ping anyone or hide a link's host (`gateway.text.rendering.render_label`)."""
    chunk: dict[str, Any] = {
        "type": "task_update",
        "id": step.id,
        "title": render_label(step.title),
        "status": step.state,
    }
    if step.detail:
        chunk["details"] = render_label(step.detail)
    return chunk


@dataclass(frozen=True, slots=True)
class Where:
    """Where a stream goes: the thread, and outside DMs the recipient Slack requires."""

    channel: str
    thread_ts: str
    recipient_user_id: str | None = None
    recipient_team_id: str | None = None

    async def start(
        self, client: AsyncWebClient, chunks: list[dict[str, Any]], *, plan: bool = False
    ) -> str:
        """`chat.startStream` here; the new message's ts. Every stream of ours is in
        Slack's chunks mode (a stream's mode is fixed by its first content): text goes as
        `markdown_text` chunks beside `task_update` cards — a reply's tool calls on a
        timeline, an acknowledgment's subtasks as a plan."""
        response = await client.chat_startStream(
            channel=self.channel,
            thread_ts=self.thread_ts,
            recipient_user_id=self.recipient_user_id,
            recipient_team_id=self.recipient_team_id,
            chunks=chunks,
            task_display_mode="plan" if plan else "timeline",
        )
        return str(response["ts"])


def stream_target(address: SlackAddress) -> Where | None:
    """Where a stream for `address` goes; None when it cannot go there (a channel task
    from before recipients were recorded, or a post at the top of a channel: streams go
    into threads)."""
    if address.top_level:
        return None
    if address.is_dm:
        return Where(address.channel, address.thread_ts)
    team = address.recipient_team
    if not address.user or not team:
        return None
    return Where(address.channel, address.thread_ts, address.user, team)


def markdown_chunk(text: str) -> dict[str, Any]:
    return {"type": "markdown_text", "text": text}


class LiveMessages:
    """What the publisher's drafts share: the client, the outbox, refusals, visibility."""

    def __init__(
        self,
        clients: SlackClients,
        outbox: Outbox,
        settings: StreamSettings,
        *,
        on_visible: Callable[[Task], None],
        on_ended: StreamEnded | None = None,
    ) -> None:
        self.clients = clients
        self.outbox = outbox
        self.settings = settings
        self.on_visible = on_visible
        self.ended: StreamEnded = on_ended or _unobserved
        self._refused: dict[str, float] = {}
        self._steps: dict[str, list[Step]] = {}
        self._senders: set[asyncio.Task[None]] = set()
        self._sending: set[str] = set()  # acknowledgments with a sender running
        self._opening: dict[str, asyncio.Event] = {}  # senders waiting for their row to open

    async def client_for(self, address: SlackAddress) -> AsyncWebClient:
        """The client of the workspace `address` is in (gateway/slack/workspaces.py)."""
        return await self.clients.for_team(address.team, address.enterprise)

    def allowed(self, address: SlackAddress) -> Where | None:
        """Where a stream for `address` goes, or None when no stream should be tried."""
        until = self._refused.get(address.channel)
        if until is not None and time.monotonic() < until:
            return None
        return stream_target(address)

    def refused(self, address: SlackAddress, error: str) -> None:
        log.info("Slack refused a stream in %s (%s): replies post whole", address.channel, error)
        if error in _NOT_HERE:
            self._refused[address.channel] = time.monotonic() + self.settings.refusal_seconds

    def opened(self, message_id: str) -> None:
        """This process opened the row of `message_id`: its card updates go out now."""
        wake = self._opening.get(message_id)
        if wake is not None:
            wake.set()

    async def step(self, task: Task, message_id: str, step: Step) -> None:
        """Update a card of the acknowledgment `message_id` (display only, never waits).

        The subtasks of a delegation are runnable as soon as it is stored, and a worker
        (maybe in another process) often starts one before the acknowledgment's stream
        is open. So updates queue per acknowledgment, in order, and one background sender
        waits (up to the call limit) for the acknowledgment's row to be open, then appends
        them; an acknowledgment that never opens (posted whole, or already completed)
        drops them — its final states go out when it is completed."""
        self._steps.setdefault(message_id, []).append(step)
        if message_id not in self._sending:
            self._sending.add(message_id)
            sender = asyncio.create_task(
                self._send_steps(task, message_id), name=f"steps-{message_id}"
            )
            self._senders.add(sender)
            sender.add_done_callback(self._senders.discard)

    async def _send_steps(self, task: Task, message_id: str) -> None:
        address = SlackAddress.parse(task.address)
        try:
            ts = await self._open_ts(message_id)
            while ts is not None and (queue := self._steps.get(message_id)):
                chunks = [task_update(step) for step in queue]
                queue.clear()
                async with slack_deadline("chat.appendStream", self.outbox.call_seconds):
                    await (await self.client_for(address)).chat_appendStream(
                        channel=address.channel, ts=ts, chunks=chunks
                    )
        except (SlackError, StorageError) as exc:
            log.debug("showing the steps of %s failed: %s", message_id, exc)
        finally:
            # Nothing awaits between the loop's last look at the queue and here, so no
            # step is left behind: a later one starts the next sender.
            self._steps.pop(message_id, None)
            self._sending.discard(message_id)

    async def _open_ts(self, message_id: str) -> str | None:
        """The ts of the acknowledgment once its row is open; None if it does not open
        within the call limit (posted whole, completed, or its start failed).

        The row is looked at again when this process opens it (`opened`: at once, so a
        subtask that ends quickly still shows "in progress" first), and otherwise at
        growing intervals, up to a second: another process may be the one opening it."""
        wake = self._opening.setdefault(message_id, asyncio.Event())
        pause = 0.05
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.outbox.call_seconds):
                    while True:
                        wake.clear()
                        shown = await self.outbox.shown_at(message_id)
                        if shown is not None and shown[0] == "open" and shown[1] is not None:
                            return shown[1]
                        if shown is not None and shown[0] == "sent":
                            return None
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(pause):
                                await wake.wait()
                        pause = min(pause * 2, 1.0)
        finally:
            self._opening.pop(message_id, None)
        return None

    async def aclose(self) -> None:
        """Stop the background senders (the process is stopping)."""
        for sender in list(self._senders):
            await stop_task(sender)


@dataclass(frozen=True, slots=True)
class Streamed:
    """A draft's message when the reply is complete: the text it shows, and the rest of
    what was rendered but not sent (the final `stopStream` can carry it)."""

    shown: str
    unsent: str
    cards: tuple[dict[str, Any], ...] = ()  # task cards whose last state was not sent yet


class SlackDraft:
    """`agent.Draft` on a Slack streaming message (module docstring)."""

    def __init__(self, live: LiveMessages, task: Task, post_id: str) -> None:
        self._live = live
        self._task = task
        self._address = SlackAddress.parse(task.address)
        self._post_id = post_id
        self._silent = False  # refused, or its outcome unknown: the publish settles it
        self.showing = Showing()  # told each time a stream starts: the model reads slower
        self._reset()

    def _reset(self) -> None:
        self._renderer = LiveRenderer()
        self._raw = ""  # arrived while the flusher was not waiting for text: not rendered yet
        self._unsent = ""
        self._cards: dict[str, dict[str, Any]] = {}  # task cards not sent yet, by id
        self._streamed = ""
        self.ts: str | None = None
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._calling = False  # a call to Slack is under way: let it end, never cut it
        self._closing = False
        self._waiting = True  # the flusher (or its absence) waits for text: render on arrival

    @property
    def silent(self) -> bool:
        """Showing nothing more (Slack refused, or an outcome is unknown)."""
        return self._silent

    async def append(self, text: str) -> None:
        if self._silent:
            return
        if not self._waiting:
            self._raw += text  # the flusher renders it when it next sends
            return
        rendered = self._renderer.feed(text)
        if not rendered:
            return
        self._unsent += rendered
        self._waiting = False
        self._wake.set()
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name=f"draft-{self._post_id}")

    def tool(self, call_id: str, title: str, state: StepState) -> None:
        """Show a work tool's call as a card on the reply's timeline (display only)."""
        if self._silent:
            return
        self._cards[call_id] = task_update(Step(call_id, title, state))
        self._wake.set()
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name=f"draft-{self._post_id}")

    async def discard(self) -> None:
        await self._stop_flusher()
        ts = self.ts
        self._reset()
        if ts is None:
            return
        task = self._task
        try:
            if await self._live.outbox.open_ts(self._post_id, task.id, task.attempts) != ts:
                return
            async with slack_deadline("chat.delete", self._live.outbox.call_seconds):
                client = await self._live.client_for(self._address)
                await client.chat_delete(channel=self._address.channel, ts=ts)
            await self._live.outbox.release(self._post_id, task.id, task.attempts, ts)
            self._live.ended("reply", "taken_back")
        except (SlackError, StorageError) as exc:
            # The row stays open: the reply, when it is published, replaces this text.
            log.info("taking back the draft %s failed (%s); the reply will replace it", ts, exc)

    async def close(self) -> Streamed | None:
        """Stop sending: what the message shows and what was not sent yet (rendered), or
        None when no message of this draft is known to show anything (the publish then
        goes by the outbox)."""
        await self._stop_flusher()
        if self.ts is None:
            return None
        unsent = self._unsent + self._render_raw() + self._renderer.flush()
        return Streamed(self._streamed, unsent, tuple(self._cards.values()))

    async def _stop_flusher(self) -> None:
        """Stop sending. A call under way is let end (bounded by the call limit): cut, its
        outcome would be unknown, and the publish would have to wait out the settle time
        and search the thread before it could post."""
        flusher, self._flusher = self._flusher, None
        if flusher is None:
            return
        self._closing = True
        if self._calling:
            with contextlib.suppress(Exception):
                await asyncio.shield(flusher)
        await stop_task(flusher)

    async def _flush(self) -> None:
        try:
            await self._send()
        except StorageError as exc:
            log.info("draft %s stopped showing: %s", self._post_id, exc)
            self._silent = True

    def _render_raw(self) -> str:
        raw, self._raw = self._raw, ""
        return self._renderer.feed(raw) if raw else ""

    async def _send(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._waiting = False
            self._unsent += self._render_raw()
            room = BLOCK_LIMIT - len(self._streamed)
            chunk, self._unsent = self._unsent[:room], self._unsent[room:]
            chunks = list(self._cards.values()) + ([markdown_chunk(chunk)] if chunk else [])
            self._cards.clear()
            if not chunks:
                # Nothing settled yet, or this message is full (the publish posts the
                # rest): wait for text again, rendering it as it arrives.
                self._waiting = True
                continue
            self._calling = True
            try:
                sent = await (self._append(chunks) if self.ts else self._start(chunks))
            finally:
                self._calling = False
            if self._closing:
                if sent:
                    self._streamed += chunk
                return
            if not sent:
                self._silent = True
                return
            self._streamed += chunk
            await asyncio.sleep(self._live.settings.interval_seconds)
            self._unsent += self._render_raw()
            if self._unsent or self._cards:
                self._wake.set()
            else:
                self._waiting = True  # nothing settled yet: render the next text on arrival

    async def _start(self, chunks: list[dict[str, Any]]) -> bool:
        task, live = self._task, self._live
        where = live.allowed(self._address)
        if where is None:
            return False
        try:
            claim = await live.outbox.claim(self._post_id, task.id, task.attempts)
        except StorageError as exc:  # Superseded included: this attempt shows nothing
            log.info("draft %s not started: %s", self._post_id, exc)
            return False
        if claim.state != "new":
            return False  # shown already, or being settled: the publish completes it
        try:
            async with slack_deadline("chat.startStream", live.outbox.call_seconds):
                ts = await where.start(await live.client_for(self._address), chunks)
        except SlackError as exc:
            await self._not_started(exc)
            return False
        self.ts = ts
        await live.outbox.opened(self._post_id, task.attempts, self.ts)
        live.opened(self._post_id)
        live.on_visible(task)
        self.showing.shown()
        return True

    async def _not_started(self, exc: SlackError) -> None:
        """The start failed: refused (the reply posts whole; remembered for the
        conversation), out of reach (nothing shows), or unknown (the publish settles it)."""
        task, live = self._task, self._live
        unknown = isinstance(exc, SlackOutcomeUnknown)
        await live.outbox.call_ended(
            self._post_id, task.attempts, posted=None if unknown else False
        )
        if isinstance(exc, SlackRefused):
            live.refused(self._address, exc.error)
            live.ended("reply", "refused")
        else:
            log.info("starting the stream for %s: %s; the publish settles it", self._post_id, exc)

    async def _append(self, chunks: list[dict[str, Any]]) -> bool:
        assert self.ts is not None
        try:
            async with slack_deadline("chat.appendStream", self._live.outbox.call_seconds):
                client = await self._live.client_for(self._address)
                await client.chat_appendStream(
                    channel=self._address.channel, ts=self.ts, chunks=chunks
                )
        except SlackError as exc:
            log.info("appending to %s failed (%s); the publish completes it", self.ts, exc)
            return False
        return True


__all__ = [
    "LiveMessages",
    "SlackDraft",
    "StreamEnded",
    "StreamSettings",
    "Streamed",
    "Where",
    "markdown_chunk",
    "stream_target",
    "task_update",
]
