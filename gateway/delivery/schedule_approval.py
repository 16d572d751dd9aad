"""Asking a schedule's owner to approve it, and showing what they decided (the agent's
`ScheduleDesk`, agent/core/schedules.py).

A schedule a conversation asked for (`schedule_create`) runs only once its owner approves
it (storage/schedule_consent.py). The request is one message in the conversation that
asked, posted through the task's outbox under the schedule's own id
(`schedule:{id}:approval`), so asking again — a retried round — posts nothing twice. It
mentions the owner, says who asked and from which message (Slack's permalink for it, or
its channel and ts when Slack gives none), what would run, when and where, and carries
the same Approve and Deny buttons as a tool approval (gateway/slack/interactive.py), whose
value names the schedule (`schedule:{id}`). The prompt is the model's text: it is shown in
a code block and rendered like a reply, so it cannot ping anyone or hide a link's host.

Once decided, the message is updated in place to show the decision, without the buttons.
That is display: the decision is what storage recorded, and a failed update changes
nothing.
"""

from __future__ import annotations

import logging

from agent import ScheduleEntry, Task
from gateway.delivery.approval import fenced, section
from gateway.delivery.posts import Posts
from gateway.delivery.reconcile import post_metadata
from gateway.slack.address import SlackAddress
from gateway.slack.errors import SlackError, slack_deadline
from gateway.slack.interactive import SCHEDULE_VALUE, approval_buttons
from gateway.slack.workspaces import SlackClients
from gateway.text.rendering import SlackMessage, render_reply
from storage import Outbox, StorageError, StoredSchedule

log = logging.getLogger(__name__)

_OUTCOMES = {
    "approved": "✅ Approved by {who}: it runs from its next period on.",
    "denied": "🚫 Denied by {who}: it never runs.",
    "timed_out": "⌛ Nobody approved it in time: it never runs.",
}


def approval_post_id(schedule_id: str) -> str:
    """The outbox id of the message that asks to approve a schedule."""
    return f"schedule:{schedule_id}:approval"


class ScheduleApprovals:
    """`agent.ScheduleDesk` on Slack (module docstring)."""

    def __init__(self, clients: SlackClients, outbox: Outbox, posts: Posts | None = None) -> None:
        """`posts` posts the requests; without (an ingress, which only shows decisions),
        `confirm` cannot be used."""
        self._clients = clients
        self._outbox = outbox
        self._posts = posts

    async def confirm(self, task: Task, entry: ScheduleEntry) -> None:
        assert self._posts is not None, "asking needs Posts"
        address = SlackAddress.parse(task.address)
        link = await self._permalink(address, task)
        message = request_message(entry, link)
        await self._posts.post(task, approval_post_id(entry.id), message)

    async def show(self, schedule: StoredSchedule, verdict: str, by: str | None) -> None:
        """Show the decision on the request's message. Display only: never raises."""
        post_id = approval_post_id(schedule.id)
        try:
            shown = await self._outbox.shown_at(post_id)
            if shown is None or shown[1] is None or schedule.asked is None:
                log.info("schedule %s: its approval message has no ts; not updated", schedule.id)
                return
            message = decided_message(schedule, verdict, by)
            client = await self._clients.for_team(schedule.team, schedule.enterprise)
            async with slack_deadline("chat.update", self._outbox.call_seconds):
                await client.chat_update(
                    channel=schedule.asked.channel,
                    ts=shown[1],
                    text=message.text,
                    blocks=list(message.blocks),
                    metadata=post_metadata(post_id),
                    parse="none",
                    link_names=False,
                )
        except (SlackError, StorageError) as exc:
            log.warning("schedule %s: showing the decision failed (%s)", schedule.id, exc)

    async def _permalink(self, address: SlackAddress, task: Task) -> str:
        """The asking message's permalink (chat.getPermalink), or its channel and ts."""
        ts = task.address.get("ts") or address.thread_ts
        where = f"message {ts} in <#{address.channel}>"
        try:
            client = await self._clients.for_team(address.team, address.enterprise)
            async with slack_deadline("chat.getPermalink", self._outbox.call_seconds):
                found = await client.chat_getPermalink(channel=address.channel, message_ts=ts)
        except SlackError as exc:
            log.info(
                "no permalink for %s/%s (%s): its channel and ts stand", address.channel, ts, exc
            )
            return where
        link = found.get("permalink")
        # Slack's own https link, written bare (`<url>`): it shows the host it opens.
        return f"<{link}>" if isinstance(link, str) and link.startswith("https://") else where


def request_message(entry: ScheduleEntry, asked_in: str) -> SlackMessage:
    """The message that asks: the schedule (rendered so it cannot ping), who asked and
    where, who decides, and the two buttons."""
    schedule = _schedule(entry)
    owner = f"<@{entry.owner}>"
    decide = (
        f"{owner}, this was asked for in your name, from {asked_in}. Only you can approve "
        "it: nothing runs until you do. If you did not ask for it, deny it."
    )
    blocks = [*schedule.blocks, section(decide), approval_buttons(SCHEDULE_VALUE + entry.id)]
    return SlackMessage(f"Approval needed: schedule {entry.id} waits for you", tuple(blocks))


def decided_message(schedule: StoredSchedule, verdict: str, by: str | None) -> SlackMessage:
    """The request as it reads once decided: the schedule and the decision, no buttons."""
    body = _schedule_text(
        schedule.id, schedule.recurrence.describe(), schedule.where, schedule.prompt
    )
    outcome = _OUTCOMES.get(verdict, "{who}").format(who=f"<@{by}>" if by else "nobody")
    text = f"{outcome} (schedule {schedule.id})"
    return SlackMessage(text, (*render_reply(body)[0].blocks, section(outcome)))


def _schedule(entry: ScheduleEntry) -> SlackMessage:
    return render_reply(_schedule_text(entry.id, entry.when, entry.where, entry.prompt))[0]


def _schedule_text(schedule_id: str, when: str, where: str, prompt: str) -> str:
    return (
        f"**Approve this schedule?** Schedule {schedule_id} would run {when}, posting to "
        f"{where}, each time asking:\n\n{fenced(prompt)}"
    )
