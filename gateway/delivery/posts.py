"""Posting one message into its thread exactly once, through its outbox row.

Every post goes through an outbox row keyed by its id (a long reply is several posts:
`id`, `id#1`, `id#2`, …) and carries Slack message metadata naming that id
(gateway/delivery/reconcile.py). A post claims its row and does what the claim answers,
one action per answer of the outbox's table (storage/outbox_states.py): "new", send it;
"unknown", settle the earlier call; "open", complete the streamed message that shows it;
"sent", nothing. Each action says whether the post is settled; if not, the next claim
says what is left to do.

A call to chat.postMessage ends one of four ways (gateway/slack/errors.py): with the
post's `ts`; refused outright (`SlackRefused`: an `ok: false` answer, a 429 after every
retry), so nothing landed; out of reach (`SlackUnavailable`: the request never reached
Slack), so nothing landed and it is sent again; or ambiguously (`SlackOutcomeUnknown`: a
5xx, a cut connection, no answer within the time limit; or the process dying mid-call).
Slack may have stored an ambiguous post, so it is never simply sent again: once the call
must be over and its post visible (the outbox's `settle_after`: the call's time limit
plus a margin, or the margin after the caller saw it end), the thread is searched for
the id (`ThreadSearch`), and only a post that is not there is sent again. The attempt
that saw the call end does this at once; a later attempt that finds the row unfinished
does the same.

Every claim is fenced by the task's lease (storage/outbox.py): a worker whose task was
taken over gets `Superseded` and posts nothing.

Every post says `parse="none"` and `link_names=False`: nothing in it is turned into a
mention.

A stream someone stopped with Slack's Stop button is never overwritten: its stop answers
`stopped_by_user`, and the post is settled as it stands (gateway/delivery/streams.py says
the rest; storage/stops.py ends the task).

With streaming on (gateway/delivery/streams.py), an acknowledgment with steps starts a
streamed message whose task cards follow the subtasks, and a post whose row is 'open'
completes that message instead of posting another.

Each post is a span of its message's trace (`outbox {kind}`): the claims it took, and what
the last one answered, are its settlement.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from agent import NO_TRACER, Step, Task, Tracer
from gateway.delivery.reconcile import NOTHING_THERE, ThreadSearch, post_metadata
from gateway.delivery.streams import LiveMessages, Streamed, markdown_chunk, task_update
from gateway.slack.address import SlackAddress
from gateway.slack.errors import (
    SlackError,
    SlackOutcomeUnknown,
    SlackRefused,
    slack_deadline,
)
from gateway.slack.workspaces import SlackClients
from gateway.text.rendering import BLOCK_LIMIT, SlackMessage
from storage import Claim, ClaimAnswer, Outbox

log = logging.getLogger(__name__)

# chat.stopStream's answer for a stream someone stopped with Slack's Stop button.
STOPPED_BY_USER = "stopped_by_user"

# A post whose outcome stays unknown is called again at most this often per publish; then
# the task is retried later (and the next attempt goes on from the outbox row). Each call
# takes a claim to make it and, when its outcome is unknown, one to settle it.
_CALLS_PER_POST = 3
_CLAIMS_PER_POST = 2 * _CALLS_PER_POST


class Posts:
    """Posts messages into their threads once each (module docstring); `live` when
    streaming is on."""

    def __init__(
        self,
        clients: SlackClients,
        outbox: Outbox,
        search: ThreadSearch,
        live: LiveMessages | None = None,
        tracer: Tracer = NO_TRACER,
    ) -> None:
        self._tracer = tracer
        self._clients = clients
        self._outbox = outbox
        self._search = search
        self._live = live
        # What a post does for each answer of its claim (storage/outbox_states.py).
        self.on_claim: Mapping[ClaimAnswer, Callable[[_Post, Claim], Awaitable[bool]]] = {
            "new": self._send,
            "unknown": self._settle,
            "open": self._finish,
            "sent": self._sent,
        }

    async def post(
        self,
        task: Task,
        post_id: str,
        message: SlackMessage,
        *,
        streamed: Streamed | None = None,
        steps: Sequence[Step] = (),
        landed: list[tuple[str, str | None]] | None = None,
    ) -> None:
        """Post `message` once: claim its outbox row and do what the claim answers (one
        action per answer, `on_claim`), until an action says the post is settled. With
        `landed`, a post this call makes (or completes) is not marked sent: it is added
        there, its id and ts, for the task's finish to mark (`agent.Delivered`)."""
        post = _Post(
            task,
            SlackAddress.parse(task.address),
            post_id,
            message,
            streamed,
            tuple(steps),
            landed,
        )
        with self._tracer.span(f"outbox {post.kind}", {"threadgate.outbox.id": post_id}) as span:
            for n in range(1, _CLAIMS_PER_POST + 1):
                claim = await self._outbox.claim(post_id, task.id, task.attempts)
                span.set({"threadgate.outbox.claims": n, "threadgate.outbox.claim": claim.state})
                if await self.on_claim[claim.state](post, claim):
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
        found = await self._search.find_post(post.address, post.id, since=claim.since)
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
        where = self._live.allowed(post.address) if self._live is not None else None
        if where is None:
            return None
        chunks = [markdown_chunk(post.markdown), *map(task_update, post.steps)]
        try:
            async with slack_deadline("chat.startStream", self._outbox.call_seconds):
                ts = await where.start(await self._client(post.address), chunks, plan=True)
        except SlackRefused as exc:
            await self._outbox.call_ended(post_id, task.attempts, posted=False)
            assert self._live is not None
            self._live.refused(post.address, exc.error)
            self._live.ended("plan", "refused")
            await self._outbox.arm(post_id, task.id, task.attempts)
            return None
        except SlackError as exc:
            await self._call_failed(post, exc)
            return False
        await self._outbox.opened(post_id, task.attempts, ts)
        assert self._live is not None
        self._live.opened(post_id)  # card updates waiting for this ts go out now
        self._live.on_visible(task)
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
        if post.steps and any(step.state in ("pending", "in_progress") for step in post.steps):
            return True  # an acknowledgment whose subtasks still run: it stays open
        if await self._stop_as_shown(post, ts):
            self._ended(post.kind, "completed")
            return True
        return await self._replace(post, ts)

    async def _stop_as_shown(self, post: _Post, ts: str) -> bool:
        """Complete the message with `chat.stopStream` when what it shows is the post: an
        acknowledgment's plan (its text went out whole with the start; its cards get their
        final states), or a reply streamed as written (the rest, with a Sources line, goes
        with the stop). False: its text must be replaced."""
        if post.steps:
            chunks = post.final_cards
        elif (
            post.streamed is not None and (rest := _rest(post.streamed, post.markdown)) is not None
        ):
            chunks = [*post.streamed.cards, *([markdown_chunk(rest)] if rest else [])]
        else:
            return False
        return await self._stop(post, ts, chunks=chunks)

    async def _replace(self, post: _Post, ts: str) -> bool:
        """Stop the stream if it still runs, and replace its text with the post's."""
        task, message = post.task, post.message
        channel = post.address.channel
        client = await self._client(post.address)
        try:
            async with slack_deadline("chat.stopStream", self._outbox.call_seconds):
                await client.chat_stopStream(
                    channel=channel,
                    ts=ts,
                    chunks=post.final_cards or None,
                    session_status=post.session_after,
                )
        except SlackRefused as exc:
            if exc.error == STOPPED_BY_USER:  # someone stopped it: it stays as it stands
                log.info("stream %s of %s was stopped in Slack; left as it stands", ts, post.id)
                await self._mark_sent(post, ts)
                return True
        except SlackError:
            pass  # already stopped (or expired) is fine: the update below sets the text
        try:
            async with slack_deadline("chat.update", self._outbox.call_seconds):
                await client.chat_update(
                    channel=channel,
                    ts=ts,
                    text=message.text,
                    blocks=list(message.blocks),
                    metadata=post_metadata(post.id),
                    parse="none",
                    link_names=False,
                )
        except SlackRefused as exc:
            if exc.error not in NOTHING_THERE:
                raise
            log.info("open message %s of %s is gone; posting afresh", ts, post.id)
            await self._outbox.release(post.id, task.id, task.attempts, ts)
            return False
        except SlackError as exc:
            log.info("completing %s at %s: %s; completing it again", post.id, ts, exc.reason)
            return False
        await self._mark_sent(post, ts)
        self._ended(post.kind, "replaced")
        return True

    def _ended(self, kind: str, outcome: str) -> None:
        if self._live is not None:
            self._live.ended(kind, outcome)

    async def _stop(self, post: _Post, ts: str, *, chunks: list[dict[str, Any]]) -> bool:
        """`chat.stopStream` with our metadata: the message is complete as it stands.
        False when Slack would not (no longer streaming, …): replace its text instead."""
        try:
            async with slack_deadline("chat.stopStream", self._outbox.call_seconds):
                client = await self._client(post.address)
                await client.chat_stopStream(
                    channel=post.address.channel,
                    ts=ts,
                    chunks=chunks or None,
                    metadata=post_metadata(post.id),
                    # What goes below the text (a reply's feedback buttons) goes with the stop.
                    blocks=list(post.message.blocks[1:]) or None,
                    session_status=post.session_after,
                )
        except SlackRefused as exc:
            if exc.error != STOPPED_BY_USER:
                log.info("stopping stream %s failed (%s); replacing its text", ts, exc)
                return False
            # Someone pressed Stop on it: what it shows is what they chose to keep.
            log.info("stream %s of %s was stopped in Slack; left as it stands", ts, post.id)
        except SlackError as exc:
            log.info("stopping stream %s failed (%s); replacing its text", ts, exc)
            return False
        await self._mark_sent(post, ts)
        return True

    async def _mark_sent(self, post: _Post, ts: str | None) -> None:
        """The post is in the thread: its row says so now, or, when the task's finish is
        to say it (`landed`), then."""
        if post.landed is not None:
            post.landed.append((post.id, ts))
        else:
            await self._outbox.mark_sent(post.id, ts)

    async def _client(self, address: SlackAddress) -> AsyncWebClient:
        """The client of the workspace the post's thread is in."""
        return await self._clients.for_team(address.team, address.enterprise)

    async def _call(self, post: _Post) -> bool:
        """One chat.postMessage. True: posted. False: not posted (Slack was out of reach)
        or its outcome is unknown; the outbox knows the call is over. Raises when Slack
        refused the post outright."""
        address, message = post.address, post.message
        client = await self._client(address)
        try:
            # The bound the outbox waits for before anyone looks for this post.
            async with slack_deadline("chat.postMessage", self._outbox.call_seconds):
                response = await client.chat_postMessage(
                    channel=address.channel,
                    thread_ts=address.thread_ts or None,  # "": at the top of the channel
                    text=message.text,
                    blocks=list(message.blocks),
                    metadata=post_metadata(post.id),
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
        await self._mark_sent(post, response.get("ts"))
        return True


class PostNotSettled(Exception):
    """Every call for a post went unanswered, and the thread did not show it."""


@dataclass(frozen=True, slots=True)
class _Post:
    """One post being made: the task, its outbox id, the message; for a reply that
    streamed, what its draft showed; for an acknowledgment, its steps."""

    task: Task
    address: SlackAddress
    id: str
    message: SlackMessage
    streamed: Streamed | None
    steps: tuple[Step, ...]
    # Where the post goes once it landed, for the task's finish to mark it sent; None:
    # marked at once.
    landed: list[tuple[str, str | None]] | None = None

    @property
    def kind(self) -> str:
        """How stream metrics name it: an acknowledgment's "plan", or a "reply"."""
        return "plan" if self.steps else "reply"

    @property
    def session_after(self) -> str:
        """The agent session's status once its stream stops: an acknowledgment's task goes
        on (`processing`), a reply ends it (`active`)."""
        return "processing" if self.steps else "active"

    @property
    def markdown(self) -> str:
        """The Markdown the message was rendered from."""
        return str(self.message.blocks[0]["text"])

    @property
    def final_cards(self) -> list[dict[str, Any]]:
        """Its task cards in their last state: an acknowledgment's steps, a reply's tools."""
        return [*map(task_update, self.steps), *(self.streamed.cards if self.streamed else ())]


def _rest(streamed: Streamed, final: str) -> str | None:
    """What the stop must add to a streamed message to show `final`: what was rendered but
    not sent, and anything the reply has after what the model wrote (its Sources line).
    None when the message does not show the start of `final` (an update replaces it)."""
    if not final.startswith(streamed.shown + streamed.unsent):
        return None
    rest = final[len(streamed.shown) :]
    return rest if len(rest) <= BLOCK_LIMIT else None
