"""Clicks on our buttons: a person deciding on a tool call, or voting on a reply.

Slack sends each click as a `block_actions` interaction payload: over HTTP to the events
URL (form-encoded, `payload=` and the JSON, signed like events: gateway/process/http.py),
or over Socket Mode as an `interactive` envelope; both reach the bolt app
(gateway/inbound/bolt_app.py), whose action listener hands the payload to `handle` and
acks once it returns. As with events, what the click decides is stored before the ack;
what Slack shows afterwards — the request's message updated to show the decision, a
private note to someone whose click changes nothing — is display, done in the background
(`Supervisor`), so no Slack call holds the ack.

A schedule a conversation asked for carries the same buttons, its value naming the
schedule (`schedule:{id}`): its owner alone decides (gateway/inbound/schedule_clicks.py).

Who decides on a tool call: the person whose message started the task (the task's
address names them) or anyone in `THREADGATE_APPROVERS`. Anyone else's click changes
nothing, and they are told so privately (`chat.postEphemeral`). The first decision stands:
a later click, or one after the request timed out or its task ended, is told what happened
instead. Votes (`feedback_buttons`) are anyone's: one per person and reply, a second
click changing it (storage/feedback.py).

A payload whose fields are not what Slack sends is `MalformedEvent`: bolt answers 400 over
HTTP, and the envelope is refused over Socket Mode, as for events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ValidationError

from agent import ApprovalDecision, ApprovalRequest, Supervisor, Task
from gateway.inbound.schedule_clicks import ScheduleClicks
from gateway.slack.address import SlackAddress
from gateway.slack.errors import SlackError
from gateway.slack.events import (
    MalformedEvent,
    SlackId,
    SlackTs,
    check_interaction_shape,
    summary,
)
from gateway.slack.interactive import APPROVE, DENY, FEEDBACK, schedule_of, vote_of
from gateway.slack.workspaces import SlackClients
from gateway.telemetry.metrics import Metrics
from storage import Database, PendingApproval, decide_approval, pending_approval, record_vote

log = logging.getLogger(__name__)

# Shows a decision where it was asked (the composition root wires delivery's
# `ApprovalMessages.show`: inbound and delivery do not import each other).
ShowDecision: TypeAlias = Callable[
    [Task, ApprovalRequest, ApprovalDecision], Coroutine[Any, Any, None]
]
Outcome: TypeAlias = Literal[
    "approved", "denied", "timed_out", "refused", "already", "ended", "unknown", "voted", "ignored"
]

NOT_YOURS = "Only {who} can decide on this tool call; your click changed nothing."
ALREADY = "This tool call was already decided ({verdict}); your click changed nothing."
ENDED = "This tool call is not waiting any more (its task ended); your click changed nothing."
_VERDICTS = {"approved": "approved", "denied": "denied", "timed_out": "nobody decided in time"}


class _User(BaseModel):
    id: SlackId


class _Action(BaseModel):
    action_id: str
    type: str
    value: str | None = None


class _Container(BaseModel):
    channel_id: SlackId | None = None
    message_ts: SlackTs | None = None
    thread_ts: SlackTs | None = None


class _BlockActions(BaseModel):
    type: Literal["block_actions"]
    user: _User
    actions: list[_Action]
    container: _Container = _Container()


def check_interaction(payload: Mapping[str, Any]) -> None:
    """`MalformedEvent` unless bolt can read the payload (`check_interaction_shape`) and,
    for `block_actions`, we can too (other interaction types pass: no listener takes them)."""
    check_interaction_shape(payload)
    if payload.get("type") == "block_actions":
        _parsed(payload)


def _parsed(payload: Mapping[str, Any]) -> _BlockActions:
    try:
        return _BlockActions.model_validate(payload)
    except ValidationError as exc:
        raise MalformedEvent(f"block_actions payload: {summary(exc)}") from exc


class Interactions:
    """What a click on one of our buttons does (module docstring)."""

    def __init__(
        self,
        db: Database,
        clients: SlackClients,
        *,
        approvers: frozenset[str],
        show: ShowDecision,
        supervisor: Supervisor,
        metrics: Metrics,
        schedules: ScheduleClicks,
    ) -> None:
        self._db = db
        self._clients = clients
        self._approvers = approvers
        self._show = show
        self._supervisor = supervisor
        self._metrics = metrics
        self._schedules = schedules

    async def handle(self, payload: Mapping[str, Any]) -> list[Outcome]:
        """Store what the payload's clicks decide; the outcome of each."""
        parsed = _parsed(payload)
        return [await self._act(parsed, action) for action in parsed.actions]

    async def _act(self, parsed: _BlockActions, action: _Action) -> Outcome:
        user = parsed.user.id
        if action.action_id in (APPROVE, DENY) and action.value:
            verdict: Literal["approved", "denied"] = (
                "approved" if action.action_id == APPROVE else "denied"
            )
            if (schedule_id := schedule_of(action.value)) is not None:
                return await self._decide_schedule(parsed, schedule_id, verdict)
            outcome = await self._decide(user, action.value, verdict)
            self._metrics.approvals.labels(outcome).inc()
            return outcome
        if action.action_id == FEEDBACK and action.value:
            return await self._vote(user, action.value)
        return "ignored"

    async def _decide(
        self, user: str, approval_id: str, verdict: Literal["approved", "denied"]
    ) -> Outcome:
        found = await pending_approval(self._db, approval_id)
        if found is None:
            return "unknown"
        if not self._may_decide(user, found):
            self._tell(found.task, user, NOT_YOURS.format(who=self._deciders(found)))
            return "refused"
        decided = await decide_approval(self._db, approval_id, verdict, user)
        if decided == "decided":
            request = ApprovalRequest(found.id, "", found.tool, found.arguments)
            decision = ApprovalDecision(verdict, user)
            self._supervisor.spawn(
                self._show(found.task, request, decision), name=f"show-{approval_id}"
            )
            return verdict
        if decided == "already":
            now = await pending_approval(self._db, approval_id)
            shown = _VERDICTS[now.decision.verdict] if now and now.decision else "decided"
            self._tell(found.task, user, ALREADY.format(verdict=shown))
            return "already"
        if decided == "ended":
            self._tell(found.task, user, ENDED)
        return decided

    async def _decide_schedule(
        self, parsed: _BlockActions, schedule_id: str, verdict: Literal["approved", "denied"]
    ) -> Outcome:
        click = await self._schedules.decide(parsed.user.id, schedule_id, verdict)
        self._metrics.schedule_decided(click.outcome)
        if click.note and click.schedule is not None:
            where = SlackAddress(
                channel=parsed.container.channel_id or "",
                thread_ts=parsed.container.thread_ts or "",
                team=click.schedule.team,
                enterprise=click.schedule.enterprise,
            )
            if where.channel:
                self._tell_at(where, parsed.user.id, click.note)
        return click.outcome

    def _may_decide(self, user: str, found: PendingApproval) -> bool:
        return user == found.task.address.get("user") or user in self._approvers

    def _deciders(self, found: PendingApproval) -> str:
        asker = found.task.address.get("user")
        return f"<@{asker}> (who asked) or an approver" if asker else "an approver"

    async def _vote(self, user: str, value: str) -> Outcome:
        vote = vote_of(value)
        if vote is None:
            return "ignored"
        recorded = await record_vote(self._db, vote[1], user, vote[0])
        if recorded in ("new", "changed"):
            self._metrics.feedback.labels(vote[0]).inc()
        return "voted" if recorded != "unknown" else "unknown"

    def _tell(self, task: Task, user: str, text: str) -> None:
        """A private note to `user` in the task's thread, in the background."""
        self._tell_at(SlackAddress.parse(task.address), user, text)

    def _tell_at(self, address: SlackAddress, user: str, text: str) -> None:
        """A private note to `user` in `address`'s channel (and thread), in the background."""
        self._supervisor.spawn(
            self._ephemeral(address, user, text), name=f"ephemeral-{address.channel}"
        )

    async def _ephemeral(self, address: SlackAddress, user: str, text: str) -> None:
        try:
            client = await self._clients.for_team(address.team, address.enterprise)
            await client.chat_postEphemeral(
                channel=address.channel, user=user, text=text, thread_ts=address.thread_ts or None
            )
        except SlackError as exc:
            log.info("telling %s privately failed (%s)", user, exc)
