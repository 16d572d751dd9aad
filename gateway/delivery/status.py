"""The status line under a thread ("is thinking…") while a task works, and when it stops.

Slack shows an assistant thread's status for two minutes at most, and clears it itself
when we post in the thread. So the status is set when work starts and set again every
`refresh_seconds` until the thread shows something of ours — a post, or a stream's first
text (the text itself then shows that the bot works; a status set after our post would
outlive the work, uncleared). When the work ends, the clearing call is made only when
nothing was posted meanwhile (a lost lease, a cancel, a deferral): it was a third of the
Slack calls of a one-round task. A status is display only: Slack refuses it outside
assistant threads, and any failure is ignored.

Nothing is set before the work has gone on for `delay_seconds`: a task answered sooner
shows its answer instead, and spends no call on a status nobody would see (three of a
quick reply's four Slack calls were status calls). A block that set nothing clears
nothing, on a task's first claim; a later claim clears and ends what an earlier one may
have set. A round that hands work to subtasks sooner sets `processing` as it ends.

The thread's Slack agent session (`agents.sessions.setStatus`) says the same to Slack:
`processing` while the task works, which shows the Stop button, and `active` when it ends
(not when a round ends by delegating: its subtasks still work, `continues`).
A work cut short by a lost lease leaves it alone: whoever holds the task now decides, and
a Stop is ended by the stopped note's publish (`end_session`). Slack sets nothing back by
itself when Stop is pressed. Slack answers setStatus with the warning
`missing_agent_session_stopped_event_subscription` while the app does not subscribe to
`agent_session_stopped` (and shows no Stop button then); it is logged once, for the
operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from agent import Task, stop_task
from gateway.slack.address import SlackAddress
from gateway.slack.errors import SlackError
from gateway.slack.workspaces import SlackClients

log = logging.getLogger(__name__)

# setStatus's warning while the app does not subscribe to `agent_session_stopped`.
NO_STOP_SUBSCRIPTION = "missing_agent_session_stopped_event_subscription"


class StatusLine:
    """The status of each working task's thread (module docstring)."""

    def __init__(
        self,
        clients: SlackClients,
        *,
        status: str,
        refresh_seconds: float,
        delay_seconds: float = 0.0,
    ) -> None:
        self._clients = clients
        self._status = status
        self._refresh_seconds = refresh_seconds
        self._delay_seconds = delay_seconds
        self._shown: set[str] = set()  # tasks whose status or session this block set
        self._visible: set[str] = set()  # tasks whose thread shows streamed text
        self._working: set[str] = set()  # tasks inside `working`
        self._posted: set[str] = set()  # those of them that posted in their thread
        self._continuing: set[str] = set()  # tasks whose round handed work to subtasks
        self._warned = False  # the missing-subscription warning was logged

    @contextlib.asynccontextmanager
    async def working(
        self, task: Task, *, before_clearing: Callable[[], Awaitable[None]]
    ) -> AsyncIterator[None]:
        """The status shown and kept while the block runs; then `before_clearing` (what
        must end before the status does: the task's drafts), then the status cleared
        unless a post of ours cleared it."""
        refresher = asyncio.create_task(self._keep(task), name=f"status-{task.id}")
        self._working.add(task.id)
        cut = False
        try:
            yield
        except asyncio.CancelledError:
            cut = True  # the lease was lost (a take-over, a Stop): not ours to end
            raise
        finally:
            self._working.discard(task.id)
            await stop_task(refresher)
            await before_clearing()
            self._visible.discard(task.id)
            # On a first claim, what this block did not set was never set (module docstring).
            shown = task.id in self._shown or task.attempts > 1
            self._shown.discard(task.id)
            if task.id not in self._posted and shown:
                await self.say(task, "")
            self._posted.discard(task.id)
            if cut:
                pass
            elif task.id in self._continuing:
                if not shown:  # the subtasks work on: their Stop button shows now
                    await self._session(task, "processing")
            elif shown:
                await self.end_session(task)
            self._continuing.discard(task.id)

    def continues(self, task: Task) -> None:
        """The task goes on after this round (its subtasks run): its session stays
        `processing` when the round ends."""
        if task.id in self._working:
            self._continuing.add(task.id)

    def visible(self, task: Task) -> None:
        """A streamed message of the task shows in its thread: no status is needed now."""
        self._visible.add(task.id)
        self.posted(task)

    def posted(self, task: Task) -> None:
        """The task posted in its thread, which cleared the status."""
        if task.id in self._working:
            self._posted.add(task.id)

    async def using(self, task: Task, tool: str) -> None:
        """Name the work tool the task calls, unless its thread shows streamed text."""
        if task.id not in self._visible:
            if task.id in self._working:
                self._shown.add(task.id)
            await self.say(task, f"is using {tool}…")

    async def say(self, task: Task, status: str) -> None:
        """Set the thread's status ("" clears it); failures are ignored."""
        address = SlackAddress.parse(task.address)
        if address.top_level:
            return  # no thread yet to show it in
        try:
            client = await self._clients.for_team(address.team, address.enterprise)
            await client.assistant_threads_setStatus(
                channel_id=address.channel, thread_ts=address.thread_ts, status=status
            )
        except SlackError as exc:
            # Status exists only in assistant threads; elsewhere Slack refuses it. Harmless.
            log.debug("setStatus refused: %s", exc)

    async def end_session(self, task: Task) -> None:
        """The thread's agent session leaves `processing`: the work is over."""
        await self._session(task, "active")

    async def _session(self, task: Task, status: str) -> None:
        """Set the thread's agent session status; failures are ignored (display only)."""
        address = SlackAddress.parse(task.address)
        if address.top_level:
            return
        try:
            client = await self._clients.for_team(address.team, address.enterprise)
            answer = await client.agents_sessions_setStatus(
                channel_id=address.channel, thread_ts=address.thread_ts, status=status
            )
        except SlackError as exc:
            log.debug("agents.sessions.setStatus refused: %s", exc)
            return
        warning = answer.get("warning")
        if warning == NO_STOP_SUBSCRIPTION and not self._warned:
            self._warned = True
            log.warning(
                "Slack shows no Stop button: the app does not subscribe to the "
                "agent_session_stopped event (%s); add it (`threadgate manifest` lists it)",
                warning,
            )

    async def _keep(self, task: Task) -> None:
        if self._delay_seconds > 0:
            await asyncio.sleep(self._delay_seconds)
        self._shown.add(task.id)
        await self._session(task, "processing")
        while True:
            # Until the first streamed text (the text itself shows that the bot works) or
            # post: a status set after our post would outlive the work, uncleared.
            if task.id not in self._visible and task.id not in self._posted:
                await self.say(task, self._status)
            await asyncio.sleep(self._refresh_seconds)
