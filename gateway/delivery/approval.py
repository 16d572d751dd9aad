"""Asking in the thread before a tool acts, and showing what was decided (the agent's
`ApprovalDesk`, agent/core/approval.py).

A request is one message in the task's thread: what the agent wants to call, with what
arguments, and two buttons — approve (`style: primary`) and deny (`style: danger`), whose
value is the request's id (gateway/slack/interactive.py). It is posted like every other
message of the task: through its outbox row, keyed by the request's id
(gateway/delivery/posts.py), so asking again after a crash posts nothing twice. The tool's
name and the model's arguments are rendered like a reply (gateway/text/rendering.py): they
cannot ping anyone; the asker is mentioned by us, so they hear that the agent waits for them.

Once decided (or timed out), the message is updated in place (`chat.update`) to show the
decision and who made it, without the buttons. That is display: the decision is what
storage recorded, and a failed update changes nothing (the click's handler and the task's
next run both show it, so a lost update is shown by the other).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from agent import ApprovalDecision, ApprovalRequest, Task
from gateway.delivery.posts import Posts
from gateway.delivery.reconcile import post_metadata
from gateway.slack.address import SlackAddress
from gateway.slack.errors import SlackError, slack_deadline
from gateway.slack.interactive import approval_buttons
from gateway.slack.workspaces import SlackClients
from gateway.text.markup import escape_entities
from gateway.text.rendering import SlackMessage, neutralize_everywhere, render_reply
from storage import Outbox, StorageError

log = logging.getLogger(__name__)

_ARGUMENT_CHARS = 2500  # of the model's arguments shown in the request (the rest is cut)
_BACKTICKS = re.compile(r"`+")
_OUTCOMES = {
    "approved": "✅ Approved by {who}: it runs.",
    "denied": "🚫 Denied by {who}: it does not run.",
    "timed_out": "⌛ Nobody decided in time: it does not run.",
}


class ApprovalMessages:
    """`agent.ApprovalDesk` on Slack (module docstring)."""

    def __init__(self, clients: SlackClients, outbox: Outbox, posts: Posts | None = None) -> None:
        """`posts` posts the requests; without (an ingress, which only shows decisions),
        `ask` cannot be used."""
        self._clients = clients
        self._outbox = outbox
        self._posts = posts

    async def ask(self, task: Task, request: ApprovalRequest) -> None:
        assert self._posts is not None, "asking needs Posts"
        address = SlackAddress.parse(task.address)
        await self._posts.post(task, request.id, request_message(request, address.user))

    async def show(self, task: Task, request: ApprovalRequest, decision: ApprovalDecision) -> None:
        address = SlackAddress.parse(task.address)
        try:
            shown = await self._outbox.shown_at(request.id)
            if shown is None or shown[1] is None:
                log.info("approval %s: its message has no ts; not updated", request.id)
                return
            message = decided_message(request, decision)
            client = await self._clients.for_team(address.team, address.enterprise)
            async with slack_deadline("chat.update", self._outbox.call_seconds):
                await client.chat_update(
                    channel=address.channel,
                    ts=shown[1],
                    text=message.text,
                    blocks=list(message.blocks),
                    metadata=post_metadata(request.id),
                    parse="none",
                    link_names=False,
                )
        except (SlackError, StorageError) as exc:
            log.warning("approval %s: showing the decision failed (%s)", request.id, exc)


def request_message(request: ApprovalRequest, asker: str | None) -> SlackMessage:
    """The message that asks: the call, rendered so it cannot ping, then who may decide
    and the two buttons."""
    call = _call(request)
    who = f"<@{asker}> or an approver" if asker else "An approver"
    decide = f"{who} can decide: the call runs only once it is approved."
    blocks = [*call.blocks, section(decide), approval_buttons(request.id)]
    return SlackMessage(
        f"Approval needed: the agent wants to call {_named(request)}", tuple(blocks)
    )


def decided_message(request: ApprovalRequest, decision: ApprovalDecision) -> SlackMessage:
    """The request as it reads once decided: the call and the decision, no buttons."""
    call = _call(request)
    who = f"<@{decision.by}>" if decision.by else "nobody"
    outcome = _OUTCOMES[decision.verdict].format(who=who)
    return SlackMessage(f"{outcome} ({_named(request)})", (*call.blocks, section(outcome)))


def _call(request: ApprovalRequest) -> SlackMessage:
    arguments = _pretty(request.arguments)
    text = (
        f"**Approve this tool call?** The agent wants to call `{request.tool}` with:\n\n"
        f"{fenced(arguments, 'json')}"
    )
    return render_reply(text)[0]


def fenced(text: str, info: str = "") -> str:
    """`text` in a Markdown code block whose fence no run of backticks in it can close."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def _named(request: ApprovalRequest) -> str:
    """The tool's name for a notification's plain text (escaped: it is mrkdwn)."""
    return escape_entities(neutralize_everywhere(request.tool))


def _pretty(arguments: str) -> str:
    try:
        shown = json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        shown = arguments
    if len(shown) > _ARGUMENT_CHARS:
        shown = shown[:_ARGUMENT_CHARS] + "\n… (cut)"
    return shown


def section(mrkdwn: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}}
