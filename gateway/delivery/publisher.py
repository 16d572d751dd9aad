"""The agent's `Publisher` (and, with streaming on, its `LiveView` and tool observer) on
Slack: a small facade over the parts that do the work, each with its own state.

- gateway/delivery/posts.py — each message posted into its thread exactly once, through
  its outbox row; an unknown outcome settled by looking in the thread
  (gateway/delivery/reconcile.py).
- gateway/delivery/status.py — "is thinking…" under the thread while a task works.
- gateway/delivery/streams.py — drafts: a reply shown while it is written, and the live
  task cards of an acknowledgment with subtasks.
- gateway/delivery/sources.py — the Sources line under a reply that cites.
- gateway/delivery/approval.py — the agent's `ApprovalDesk`: a tool call that waits for a
  person is asked in the thread, with approve and deny buttons, and shows its decision.
- gateway/delivery/schedule_approval.py — the agent's `ScheduleDesk`: a schedule a
  conversation asked for is put to its owner the same way.

Publishing renders the text (gateway/text/rendering.py: no pings, links show their host),
splits a long reply into posts (`id`, `id#1`, …) and posts each; a reply that was shown
as a draft is completed (the draft's streamed message becomes the reply) rather than
posted beside it. A reply published `finishing` (the task ends next) leaves the record that
its posts landed to the task's finish, which makes it in its own statement (`agent.Delivered`,
storage/queue.py); a crash between the two leaves them to be found, not posted again.
Every final reply carries Slack's feedback buttons (a `context_actions`
block, gateway/slack/interactive.py) on its last message: posted with it, or, when that
message is the draft's stream, sent with its `chat.stopStream`. Publishing the note that
someone stopped the task (`task:{id}:stopped`) names who pressed Stop (anyone in the
thread may) and ends the thread's agent session (gateway/delivery/status.py). The reply to a message a credential was redacted
from ends with one sentence saying so (`redacted` in the task's address,
gateway/text/secrets.py): part of the reply's text, it is posted with it exactly once.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from agent import (
    NO_TRACER,
    NOTHING_DELIVERED,
    ApprovalDecision,
    ApprovalRequest,
    Citation,
    Delivered,
    ScheduleEntry,
    Step,
    StepState,
    Task,
    ToolCallRecord,
    Tracer,
)
from gateway.delivery.approval import ApprovalMessages
from gateway.delivery.posts import Posts
from gateway.delivery.reconcile import ThreadSearch
from gateway.delivery.schedule_approval import ScheduleApprovals
from gateway.delivery.sources import SourceLinks
from gateway.delivery.status import StatusLine
from gateway.delivery.streams import LiveMessages, SlackDraft, StreamEnded, StreamSettings
from gateway.slack.address import SlackAddress
from gateway.slack.interactive import feedback_buttons
from gateway.slack.workspaces import SlackClients
from gateway.text.rendering import SlackMessage, render_reply
from gateway.text.secrets import ROTATE_NOTE
from gateway.text.tool_progress import progress_title
from storage import Outbox

# Who pressed Stop, as storage records the actor (storage/stops.py).
_PRESSER = re.compile(r"slack:([UW][A-Z0-9]{2,20})")


def stop_presser(task: Task) -> str | None:
    """The Slack user who stopped the task, None when it is not known."""
    found = _PRESSER.fullmatch(task.stopped_by or "")
    return found.group(1) if found else None


_TOOL_STATES: dict[str, StepState] = {"running": "in_progress", "ok": "complete", "error": "error"}


@dataclass(frozen=True, slots=True)
class PublisherSettings:
    """How the publisher shows work: the status line, drafts, and how long an unknown
    post's outcome is looked for."""

    status: str = "is thinking…"
    status_refresh_seconds: float = 90.0
    status_delay_seconds: float = 0.0
    reconcile_seconds: float = 60.0
    streams: StreamSettings | None = None  # None: replies posted whole, no drafts
    # Who our bot is, to find its own posts in a thread; None with many workspaces, where
    # each installation says.
    bot_user_id: str | None = None
    bot_id: str | None = None


class SlackPublisher:
    """`agent.Publisher` on Slack (module docstring)."""

    def __init__(
        self,
        client: AsyncWebClient | SlackClients,
        outbox: Outbox,
        settings: PublisherSettings = PublisherSettings(),
        *,
        on_stream_ended: StreamEnded | None = None,
        on_passage_cited: Callable[[str], None] = lambda backed_by: None,
        tracer: Tracer = NO_TRACER,
    ) -> None:
        # Each task's calls use its workspace's client (gateway/slack/workspaces.py).
        self._clients = client if isinstance(client, SlackClients) else SlackClients.single(client)
        self._status = StatusLine(
            self._clients,
            status=settings.status,
            refresh_seconds=settings.status_refresh_seconds,
            delay_seconds=settings.status_delay_seconds,
        )
        self._live = (
            None
            if settings.streams is None
            else LiveMessages(
                self._clients,
                outbox,
                settings.streams,
                on_visible=self._status.visible,
                on_ended=on_stream_ended,
            )
        )
        search = ThreadSearch(
            self._clients,
            outbox,
            bot_user_id=settings.bot_user_id,
            bot_id=settings.bot_id,
            reconcile_seconds=settings.reconcile_seconds,
            orphans=self._live is not None,
        )
        self._posts = Posts(self._clients, outbox, search, self._live, tracer)
        self._sources = SourceLinks(
            outbox, call_seconds=outbox.call_seconds, on_passage=on_passage_cited
        )
        self._approvals = ApprovalMessages(self._clients, outbox, self._posts)
        self._schedules = ScheduleApprovals(self._clients, outbox, self._posts)
        self._drafts: dict[tuple[str, str], SlackDraft] = {}  # by task id and message id

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
        finishing: bool = False,
    ) -> Delivered:
        draft = self._drafts.pop((task.id, message_id), None)
        streamed = await draft.close() if draft is not None else None
        # The Sources line goes under the text, rendered with it (gateway/delivery/sources.py); a
        # streamed reply gets it with its final stopStream or update.
        sources = await self._sources_line(task, citations) if citations else ""
        if message_id == task.reply_id and SlackAddress.parse(task.address).redacted:
            text = f"{text}\n\n{ROTATE_NOTE}"
        presser = stop_presser(task) if message_id == task.stopped_id else None
        if presser is not None:
            # Our own words and a Slack id checked by its shape: the one mention allowed.
            parts = render_reply(f"<@{presser}> pressed Stop. {text}", allow_mentions=True)
        else:
            parts = render_reply(f"{text}\n\n{sources}" if sources else text)
        if message_id == task.reply_id:
            parts[-1] = _with_feedback(parts[-1], message_id)
        # Finishing, the posts that land are marked sent by the task's finish (agent.Delivered).
        landed: list[tuple[str, str | None]] | None = [] if finishing else None
        for n, part in enumerate(parts):
            if n == 0:
                await self._posts.post(
                    task, message_id, part, streamed=streamed, steps=steps, landed=landed
                )
            else:
                await self._posts.post(task, f"{message_id}#{n}", part, landed=landed)
        self._status.posted(task)
        if any(step.state in ("pending", "in_progress") for step in steps):
            self._status.continues(task)  # its subtasks work on: the session stays busy
        if message_id == task.stopped_id:
            # The note that someone stopped the work ends the thread's agent session: Slack
            # leaves it `processing` after a Stop until the app says otherwise.
            await self._status.end_session(task)
        return Delivered(tuple(landed)) if landed else NOTHING_DELIVERED

    # The agent's ApprovalDesk (gateway/delivery/approval.py)

    async def ask(self, task: Task, request: ApprovalRequest) -> None:
        await self._approvals.ask(task, request)

    async def show(self, task: Task, request: ApprovalRequest, decision: ApprovalDecision) -> None:
        await self._approvals.show(task, request, decision)

    # The agent's ScheduleDesk (gateway/delivery/schedule_approval.py)

    async def confirm(self, task: Task, entry: ScheduleEntry) -> None:
        await self._schedules.confirm(task, entry)

    async def _sources_line(self, task: Task, citations: Sequence[Citation]) -> str:
        address = SlackAddress.parse(task.address)  # permalinks are asked in its workspace
        client = await self._clients.for_team(address.team, address.enterprise)
        return await self._sources.line(citations, client)

    # The agent's LiveView (with streaming on)

    def draft(self, task: Task, message_id: str) -> SlackDraft:
        assert self._live is not None, "drafts need streaming (StreamSettings)"
        draft = SlackDraft(self._live, task, message_id)
        self._drafts[(task.id, message_id)] = draft
        return draft

    async def step(self, task: Task, message_id: str, step: Step) -> None:
        if self._live is not None:
            await self._live.step(task, message_id, step)

    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        """`agent.ToolObserver`: a work tool's call shown while it runs — a card on the
        reply's timeline when the reply streams, its title saying how far the call has come
        when its tool reports progress (`gateway.text.tool_progress`; sent at the draft's
        pace, the latest report winning), else the status line names the tool. A
        sub-agent's call is never the reply's: it may run while the round that delegated
        still holds the reply's draft, which would start a stream for it."""
        draft = self._drafts.get((task.id, task.reply_id))
        if draft is not None and not draft.silent and record.subtask_type is None:
            title = progress_title(record.name, record.progress)
            draft.tool(record.call_id, title, _TOOL_STATES[record.state])
            return
        if record.state == "running" and record.progress is None:
            await self._status.using(task, record.name)

    @contextlib.asynccontextmanager
    async def working(self, task: Task) -> AsyncIterator[None]:
        """The task's status under its thread while it works (gateway/delivery/status.py);
        its drafts are closed when it ends."""

        async def close_drafts() -> None:
            for key in [key for key in self._drafts if key[0] == task.id]:
                await self._drafts.pop(key).close()

        async with self._status.working(task, before_clearing=close_drafts):
            yield


def _with_feedback(part: SlackMessage, reply_id: str) -> SlackMessage:
    """The reply's last message with the feedback buttons below its text."""
    return SlackMessage(part.text, (*part.blocks, feedback_buttons(reply_id)))
