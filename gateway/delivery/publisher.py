"""Posting the agent's messages into their Slack thread, each exactly once.

Every post goes through an outbox row keyed by its message id (a long reply is several
posts: `id`, `id#1`, `id#2`, …) and carries Slack message metadata naming that id.

A call to chat.postMessage ends one of four ways (gateway/slack/errors.py): with the
post's `ts`; refused outright (`SlackRefused`: an `ok: false` answer, a 429 after every
retry), so nothing landed; out of reach (`SlackUnavailable`: the request never reached
Slack), so nothing landed and it is sent again; or ambiguously (`SlackOutcomeUnknown`: a
5xx, a cut connection, no answer within the time limit; or the process dying mid-call).
Slack may have stored an ambiguous post, so it is never simply sent again: once the call
must be over and its post visible (the outbox's `settle_after`: the call's time limit
plus a margin, or the margin after the caller saw it end), the thread is searched for
the id, and only a post that is not there is sent again. The attempt that saw the call
end does this at once; a later attempt that finds the row unfinished does the same.

The search reads only messages of our own bot user, posted since the row was first
claimed, and retries reads that fail transiently (429, 5xx, a cut connection) within a
time limit. Then it settles on one outcome: a thread it cannot read (`missing_scope` — a
group DM without `mpim:history` —, `not_in_channel`, …), or not within the limit, counts
the post as delivered, unverified, and says so in the log. The call that may have posted
it reached Slack; posting again would show it twice, and a failure notice would follow
a reply that may well be there.

Every claim is fenced by the task's lease (storage/outbox.py): a worker whose task was
taken over gets `Superseded` and posts nothing.

Every post says `parse="none"` and `link_names=False`: nothing in it is turned into a
mention.

With streaming on (`gateway.delivery.streams`), the publisher is also the agent's `LiveView`: a reply
shows while it is written (a draft), an acknowledgment with subtasks starts a streamed
message whose task cards follow the subtasks, and publishing a message whose outbox row is
'open' completes that message instead of posting another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from agent import (
    Citation,
    ShownReplies,
    Step,
    StepState,
    Task,
    ToolCallRecord,
    counting_shown,
    stop_task,
)
from gateway.delivery.sources import SourceLinks
from gateway.delivery.streams import (
    LiveMessages,
    SlackDraft,
    Streamed,
    StreamEnded,
    StreamSettings,
    markdown_chunk,
    task_update,
)
from gateway.slack.errors import (
    SlackError,
    SlackOutcomeUnknown,
    SlackRefused,
    slack_deadline,
    worth_rereading,
)
from gateway.slack.workspaces import NotInstalled, SlackClients
from gateway.text.rendering import BLOCK_LIMIT, SlackMessage, render_reply
from storage import Claim, ClaimAnswer, Outbox, Settlement, StoredInstallation

log = logging.getLogger(__name__)

METADATA_EVENT = "threadgate_post"
_NOTHING_THERE = frozenset({"thread_not_found", "message_not_found"})
# A post whose outcome stays unknown is called again at most this often per publish; then
# the task is retried later (and the next attempt goes on from the outbox row). Each call
# takes a claim to make it and, when its outcome is unknown, one to settle it.
_CALLS_PER_POST = 3
_CLAIMS_PER_POST = 2 * _CALLS_PER_POST
_TOOL_STATES: dict[str, StepState] = {"running": "in_progress", "ok": "complete", "error": "error"}
_CLOCK_SKEW_SECONDS = 60.0


class SlackPublisher:
    """`agent.Publisher` on Slack."""

    def __init__(
        self,
        client: AsyncWebClient | SlackClients,
        outbox: Outbox,
        *,
        bot_user_id: str | None = None,
        bot_id: str | None = None,
        status: str = "is thinking…",
        status_refresh_seconds: float = 90.0,
        reconcile_seconds: float = 60.0,
        streams: StreamSettings | None = None,
        on_stream_ended: StreamEnded | None = None,
    ) -> None:
        # Each task's calls use its workspace's client (gateway/slack/workspaces.py).
        self._clients = client if isinstance(client, SlackClients) else SlackClients.single(client)
        self._outbox = outbox
        self._sources = SourceLinks(outbox, call_seconds=outbox.call_seconds)
        self._visible: set[str] = set()  # tasks whose thread shows streamed text
        # Tasks inside `working`, each with how many of its replies show (its streams' pace).
        self._working: dict[str, ShownReplies] = {}
        self._posted: set[str] = set()  # those of them that posted in their thread
        self._drafts: dict[tuple[str, str], SlackDraft] = {}
        self._live = (
            None
            if streams is None
            else LiveMessages(
                self._clients,
                outbox,
                streams,
                on_visible=self._on_visible,
                on_ended=on_stream_ended,
            )
        )
        self._bot_user_id = bot_user_id
        self._bot_id = bot_id
        self._status = status
        self._refresh_seconds = status_refresh_seconds
        self._reconcile_seconds = reconcile_seconds
        # What a post does for each answer of its claim (storage/outbox_states.py).
        self._on_claim: Mapping[ClaimAnswer, Callable[[_Post, Claim], Awaitable[bool]]] = {
            "new": self._send,
            "unknown": self._settle,
            "open": self._finish,
            "sent": self._sent,
        }

    @property
    def streaming(self) -> bool:
        return self._live is not None

    async def aclose(self) -> None:
        """Stop what still shows steps in the background (the process is stopping)."""
        if self._live is not None:
            await self._live.aclose()

    async def publish(
        self,
        task: Task,
        message_id: str,
        text: str,
        *,
        steps: Sequence[Step] = (),
        citations: Sequence[Citation] = (),
    ) -> None:
        draft = self._drafts.pop((task.id, message_id), None)
        streamed = await draft.close() if draft is not None else None
        # The Sources line goes under the text, rendered with it (gateway/delivery/sources.py); a
        # streamed reply gets it with its final stopStream or update.
        sources = (
            await self._sources.line(citations, await self._clients.for_address(task.address))
            if citations
            else ""
        )
        for n, part in enumerate(render_reply(f"{text}\n\n{sources}" if sources else text)):
            if n == 0:
                await self._post_once(task, message_id, part, streamed=streamed, steps=steps)
            else:
                await self._post_once(task, f"{message_id}#{n}", part)
        self._did_post(task)

    # The agent's LiveView (with streaming on)

    def draft(self, task: Task, message_id: str) -> SlackDraft:
        assert self._live is not None, "drafts need streaming (StreamSettings)"
        draft = SlackDraft(self._live, task, message_id)
        self._drafts[(task.id, message_id)] = draft
        return draft

    async def step(self, task: Task, message_id: str, step: Step) -> None:
        if self._live is not None:
            await self._live.step(task, message_id, step)

    def _on_visible(self, task: Task) -> None:
        self._visible.add(task.id)
        replies = self._working.get(task.id)
        if replies is not None:
            replies.shown()  # its stream may slow now (agent/models/providers/transport.py)
        self._did_post(task)

    def _did_post(self, task: Task) -> None:
        if task.id in self._working:
            self._posted.add(task.id)

    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        """`agent.ToolObserver`: a work tool's call shown while it runs — a card on the
        reply's timeline when the reply streams, else the status line names the tool. A
        sub-agent's call is never the reply's: it may run while the round that delegated
        still holds the reply's draft, which would start a stream for it."""
        draft = self._drafts.get((task.id, task.reply_id))
        if draft is not None and not draft.silent and record.subtask_type is None:
            draft.tool(record.call_id, record.name, _TOOL_STATES[record.state])
            return
        if record.state == "running" and task.id not in self._visible:
            await self._set_status(task, f"is using {record.name}…")

    @contextlib.asynccontextmanager
    async def working(self, task: Task) -> AsyncIterator[None]:
        """ "is thinking…" in the thread, refreshed before Slack's two-minute expiry, then
        cleared. Slack clears it itself when we post in the thread, so the clearing call is
        made only when nothing was posted meanwhile (a lost lease, a cancel, a deferral): it
        was a third of the Slack calls of a one-round task."""
        refresher = asyncio.create_task(self._keep_status(task), name=f"status-{task.id}")
        replies = self._working[task.id] = ShownReplies()
        try:
            with counting_shown(replies):
                yield
        finally:
            self._working.pop(task.id, None)
            await stop_task(refresher)
            for key in [key for key in self._drafts if key[0] == task.id]:
                await self._drafts.pop(key).close()
            self._visible.discard(task.id)
            if task.id not in self._posted:
                await self._set_status(task, "")
            self._posted.discard(task.id)

    async def _keep_status(self, task: Task) -> None:
        while True:
            # Until the first streamed text (the text itself shows that the bot works) or
            # post: a status set after our post would outlive the work, uncleared.
            if task.id not in self._visible and task.id not in self._posted:
                await self._set_status(task, self._status)
            await asyncio.sleep(self._refresh_seconds)

    async def _set_status(self, task: Task, status: str) -> None:
        try:
            client = await self._clients.for_address(task.address)
            await client.assistant_threads_setStatus(
                channel_id=task.address["channel"],
                thread_ts=task.address["thread_ts"],
                status=status,
            )
        except (SlackError, NotInstalled) as exc:
            # Status exists only in assistant threads; elsewhere Slack refuses it. Harmless.
            log.debug("setStatus refused: %s", exc)

    async def _post_once(
        self,
        task: Task,
        post_id: str,
        message: SlackMessage,
        *,
        streamed: Streamed | None = None,
        steps: Sequence[Step] = (),
    ) -> None:
        """Post `message` once: claim its outbox row and do what the claim answers (one
        action per answer, `_on_claim`), until an action says the post is settled."""
        post = _Post(task, post_id, message, streamed, tuple(steps))
        for _ in range(_CLAIMS_PER_POST):
            claim = await self._outbox.claim(post_id, task.id, task.attempts)
            if await self._on_claim[claim.state](post, claim):
                return
        raise PostNotSettled(f"{_CALLS_PER_POST} calls to Slack for {post_id} went unanswered")

    async def _sent(self, post: _Post, claim: Claim) -> bool:
        """ "sent": the post is in the thread; nothing to do."""
        return True

    async def _send(self, post: _Post, claim: Claim) -> bool:
        """ "new": send the post — an acknowledgment with steps as a streamed plan where
        streams may go, else one chat.postMessage."""
        if post.steps:
            shown = await self._start_plan(post)
            if shown is not None:
                return shown
        return await self._call(post)

    async def _settle(self, post: _Post, claim: Claim) -> bool:
        """ "unknown": once the earlier call must be over and its post visible (a search
        any earlier could miss a post still landing, and post it twice), look for it in
        the thread and record what was found; the next claim says what is left to do."""
        await asyncio.sleep(claim.wait_seconds)
        found = await self.find_post(post.task.address, post.id, since=claim.since)
        now = await self._outbox.settle(post.id, post.task.attempts, found.outcome, found.ts)
        return now == "sent"

    async def _finish(self, post: _Post, claim: Claim) -> bool:
        """ "open": a streamed message shows the post; complete it as this post."""
        if claim.ts is None:
            return await self._send(post, claim)
        return await self._complete(post, claim.ts)

    async def _start_plan(self, post: _Post) -> bool | None:
        """Post an acknowledgment as a streamed message whose task cards show its steps.
        True: it shows (the row is open). False: the start never reached Slack or its
        outcome is unknown (the next claim says what to do). None: no stream goes here, or
        Slack refused it: post it plainly (the row is armed again)."""
        task, post_id = post.task, post.id
        where = self._live.allowed(task.address) if self._live is not None else None
        if where is None:
            return None
        chunks = [markdown_chunk(_markdown(post.message)), *map(task_update, post.steps)]
        try:
            async with slack_deadline("chat.startStream", self._outbox.call_seconds):
                ts = await where.start(
                    await self._clients.for_address(task.address), chunks, plan=True
                )
        except SlackRefused as exc:
            await self._outbox.call_ended(post_id, task.attempts, posted=False)
            assert self._live is not None
            self._live.refused(task.address, exc.error)
            self._live.ended("plan", "refused")
            await self._outbox.arm(post_id, task.id, task.attempts)
            return None
        except SlackError as exc:
            await self._call_failed(post, exc)
            return False
        await self._outbox.opened(post_id, task.attempts, ts)
        assert self._live is not None
        self._live.opened(post_id)  # card updates waiting for this ts go out now
        self._on_visible(task)
        return True

    async def _call_failed(self, post: _Post, exc: SlackError) -> None:
        """A call that made no post: nothing landed (refused, or never reached Slack) and
        the next claim sends it again, or its outcome is unknown and the next claim looks
        in the thread once it must show."""
        unknown = isinstance(exc, SlackOutcomeUnknown)
        log.warning(
            "%s %s: %s; %s",
            exc.method,
            post.id,
            exc.reason,
            "looking in the thread" if unknown else "nothing was posted",
        )
        await self._outbox.call_ended(
            post.id, post.task.attempts, posted=None if unknown else False
        )

    async def _complete(self, post: _Post, ts: str) -> bool:
        """Finish the open message `ts` as this post. False when that did not happen: the
        message is gone (its row is released: the next claim posts afresh), or the update's
        outcome is unknown (completing is idempotent: the next claim completes it again)."""
        task, post_id, message, streamed, steps = (
            post.task,
            post.id,
            post.message,
            post.streamed,
            post.steps,
        )
        if steps and any(step.state in ("pending", "in_progress") for step in steps):
            return True  # an acknowledgment whose subtasks still run: it stays open
        channel = task.address["channel"]
        client = await self._clients.for_address(task.address)
        metadata = _metadata(post_id)
        final = [task_update(step) for step in steps]
        if streamed is not None:
            final += streamed.cards  # a reply's tool cards, in their last state
        kind = "plan" if steps else "reply"
        if steps:
            # An acknowledgment's plan: its text went out whole with the start, its cards
            # get their final states here.
            if await self._stop(task, post_id, ts, chunks=final, metadata=metadata):
                self._ended(kind, "completed")
                return True
        elif (
            streamed is not None
            and (rest := _rest(streamed, _markdown(message))) is not None
            # A reply streamed as written: the rest (with a Sources line) goes with the stop.
            and await self._stop(
                task,
                post_id,
                ts,
                chunks=[*streamed.cards, *([markdown_chunk(rest)] if rest else [])],
                metadata=metadata,
            )
        ):
            self._ended(kind, "completed")
            return True
        with contextlib.suppress(SlackError):
            async with slack_deadline("chat.stopStream", self._outbox.call_seconds):
                # Already stopped (or expired) is fine: the update below sets the text.
                await client.chat_stopStream(channel=channel, ts=ts, chunks=final or None)
        try:
            async with slack_deadline("chat.update", self._outbox.call_seconds):
                await client.chat_update(
                    channel=channel,
                    ts=ts,
                    text=message.text,
                    blocks=list(message.blocks),
                    metadata=metadata,
                    parse="none",
                    link_names=False,
                )
        except SlackRefused as exc:
            if exc.error not in _NOTHING_THERE:
                raise
            log.info("open message %s of %s is gone; posting afresh", ts, post_id)
            await self._outbox.release(post_id, task.id, task.attempts, ts)
            return False
        except SlackError as exc:
            log.info("completing %s at %s: %s; completing it again", post_id, ts, exc.reason)
            return False
        await self._outbox.mark_sent(post_id, ts)
        self._ended(kind, "replaced")
        return True

    def _ended(self, kind: str, outcome: str) -> None:
        if self._live is not None:
            self._live.ended(kind, outcome)

    async def _stop(
        self,
        task: Task,
        post_id: str,
        ts: str,
        *,
        metadata: dict[str, Any],
        chunks: list[dict[str, Any]] | None = None,
    ) -> bool:
        """`chat.stopStream` with our metadata: the message is complete as it stands.
        False when Slack would not (no longer streaming, …): replace its text instead."""
        try:
            async with slack_deadline("chat.stopStream", self._outbox.call_seconds):
                client = await self._clients.for_address(task.address)
                await client.chat_stopStream(
                    channel=task.address["channel"], ts=ts, chunks=chunks or None, metadata=metadata
                )
        except (SlackError, NotInstalled) as exc:
            log.info("stopping stream %s failed (%s); replacing its text", ts, exc)
            return False
        await self._outbox.mark_sent(post_id, ts)
        return True

    async def _call(self, post: _Post) -> bool:
        """One chat.postMessage. True: posted. False: not posted (Slack was out of reach)
        or its outcome is unknown; the outbox knows the call is over. Raises when Slack
        refused the post outright."""
        address, message = post.task.address, post.message
        client = await self._clients.for_address(address)
        try:
            # The bound the outbox waits for before anyone looks for this post.
            async with slack_deadline("chat.postMessage", self._outbox.call_seconds):
                response = await client.chat_postMessage(
                    channel=address["channel"],
                    thread_ts=address["thread_ts"],
                    text=message.text,
                    blocks=list(message.blocks),
                    metadata=_metadata(post.id),
                    unfurl_links=False,
                    unfurl_media=False,
                    # Explicit, not Slack's defaults: with `parse=full` or `link_names` Slack
                    # would turn a bare `@here` or `@name` in the text into a ping.
                    parse="none",
                    link_names=False,
                )
        except SlackRefused as exc:
            await self._call_failed(post, exc)
            raise
        except SlackError as exc:
            await self._call_failed(post, exc)
            return False
        await self._outbox.mark_sent(post.id, response.get("ts"))
        return True

    async def find_post(
        self, address: Mapping[str, str], post_id: str, *, since: datetime | None = None
    ) -> Found:
        """How looking for our post carrying `post_id` in the thread ends (`Found`). Reads
        failing transiently are retried within `reconcile_seconds`; a thread that cannot be
        read, or not in time, is "unverified": the post is counted as delivered."""
        pause = 1.0
        try:
            async with asyncio.timeout(self._reconcile_seconds):
                while True:
                    try:
                        return await self._search(address, post_id, since)
                    except SlackError as exc:
                        if not worth_rereading(exc):
                            return _unverified(address, post_id, exc.reason)
                        reason = exc.reason
                    log.info("reading the thread for %s failed (%s); trying again", post_id, reason)
                    await asyncio.sleep(pause)  # a pause between reads, bounded by the limit
                    pause = min(pause * 2, 10.0)
        except TimeoutError:
            return _unverified(address, post_id, f"unreadable for {self._reconcile_seconds:g}s")

    async def _search(
        self, address: Mapping[str, str], post_id: str, since: datetime | None
    ) -> Found:
        """Our post carrying `post_id`; failing that, an orphaned stream (our message
        without our metadata, which no outbox row accounts for), the earliest first."""
        # Slack's clock and the database's may differ a little: start a bit earlier.
        oldest = None if since is None else f"{since.timestamp() - _CLOCK_SKEW_SECONDS:.6f}"
        cursor = None
        unmarked: list[str] = []
        workspace = await self._clients.workspace(address.get("team"), address.get("enterprise"))
        while True:
            try:
                page = await workspace.client.conversations_replies(
                    channel=address["channel"],
                    ts=address["thread_ts"],
                    oldest=oldest,
                    include_all_metadata=True,
                    limit=200,
                    cursor=cursor,
                )
            except SlackRefused as exc:
                if exc.error in _NOTHING_THERE:
                    return Found("absent")  # no thread yet, so our post cannot be in it
                raise
            for message in page.get("messages") or []:
                if not self._is_ours(message, workspace.installation):
                    continue
                if _outbox_id(message) == post_id:
                    return Found("found", str(message.get("ts")))
                if self._live is not None and _unmarked(message, address):
                    unmarked.append(str(message.get("ts")))
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
        if since is None or not unmarked:
            return Found("absent")  # without a bound, any old message of ours could pass
        known = await self._outbox.known_refs(unmarked)
        orphans = sorted((ts for ts in unmarked if ts not in known), key=float)
        return Found("orphan", orphans[0]) if orphans else Found("absent")

    def _is_ours(self, message: Mapping[str, Any], found: StoredInstallation | None = None) -> bool:
        """Posted by our bot user (anyone could copy our metadata into a message); with many
        workspaces, the bot user of the thread's workspace's installation (`found`)."""
        bot_user_id, bot_id = (
            (found.bot_user_id, found.bot_id) if found else (self._bot_user_id, self._bot_id)
        )
        if bot_user_id is None and bot_id is None:
            return True  # not told who we are: the metadata alone decides
        return (bot_user_id is not None and message.get("user") == bot_user_id) or (
            bot_id is not None and message.get("bot_id") == bot_id
        )


@dataclass(frozen=True, slots=True)
class Found:
    """How a search of the thread for a post ended (storage/outbox_states.py): "found"
    at `ts`; "orphan": not the post itself but a stream some attempt started for it and
    never completed, at `ts`; "unverified": counted as delivered without having been seen
    (the thread could not be read); "absent": not there."""

    outcome: Settlement
    ts: str | None = None


class PostNotSettled(Exception):
    """Every call for a post went unanswered, and the thread did not show it."""


@dataclass(frozen=True, slots=True)
class _Post:
    """One post being made: the task, its outbox id, the message; for a reply that
    streamed, what its draft showed; for an acknowledgment, its steps."""

    task: Task
    id: str
    message: SlackMessage
    streamed: Streamed | None
    steps: tuple[Step, ...]


def _rest(streamed: Streamed, final: str) -> str | None:
    """What the stop must add to a streamed message to show `final`: what was rendered but
    not sent, and anything the reply has after what the model wrote (its Sources line).
    None when the message does not show the start of `final` (an update replaces it)."""
    if not final.startswith(streamed.shown + streamed.unsent):
        return None
    rest = final[len(streamed.shown) :]
    return rest if len(rest) <= BLOCK_LIMIT else None


def _metadata(post_id: str) -> dict[str, Any]:
    return {"event_type": METADATA_EVENT, "event_payload": {"outbox_id": post_id}}


def _markdown(message: SlackMessage) -> str:
    return str(message.blocks[0]["text"])


def _unverified(address: Mapping[str, str], post_id: str, why: str) -> Found:
    log.warning(
        "cannot read thread %s/%s to settle post %s (%s): counted as delivered, unverified",
        address["channel"],
        address["thread_ts"],
        post_id,
        why,
    )
    return Found("unverified")


def _unmarked(message: Mapping[str, Any], address: Mapping[str, str]) -> bool:
    """A message of ours in the thread without our metadata: what a stream shows before
    `stopStream` puts the metadata on (the thread's own root is not one)."""
    return not message.get("metadata") and message.get("ts") != address["thread_ts"]


def _outbox_id(message: Mapping[str, Any]) -> str | None:
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != METADATA_EVENT:
        return None
    payload = metadata.get("event_payload") or {}
    value = payload.get("outbox_id")
    return value if isinstance(value, str) else None
