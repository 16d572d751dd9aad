"""The "Ask threadgate about this message" shortcut: pressed, it opens the modal; submitted,
the modal's request becomes one task (gateway/inbound/asks.py).

Both payloads reach the bolt app like clicks (HTTP form posts, or Socket Mode
`interactive` envelopes) and are acked once their listener returns (gateway/inbound/
bolt_app.py). A press opens the modal with `views.open` before the ack: its trigger is
good for 3 seconds and for one view, so a press delivered twice opens one modal — Slack
answers the second `views.open` with `exchanged_trigger_id`, counted as `duplicate` — and
a modal opened too late (`expired_trigger_id`) is counted as `expired`. Someone the
allowlists do not answer where the message is gets a modal that says so instead, rather
than a form whose submission would be dropped.

A submission is admitted before its ack (nothing is lost once the modal closes), keyed on
its view, so a redelivered one makes no second task. When its answer can go nowhere (the
person's DM could not be opened) it raises the Slack failure: not acked, Slack shows the
person an error in the modal, and their next try is a fresh admission.

`threadgate_shortcuts_total{step, outcome}` counts both steps (gateway/telemetry).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from slack_sdk.web.async_client import AsyncWebClient

from gateway.inbound.asks import Ask, Asks, allowed
from gateway.inbound.gatekeeper import Gatekeeper
from gateway.slack.errors import SlackError, SlackRefused, slack_deadline
from gateway.slack.events import Tenant
from gateway.slack.shortcut import ask_modal, ask_submission, refusal_modal, shortcut_press
from gateway.slack.workspaces import SlackClients
from gateway.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

# The gatekeeper of a workspace (team id, enterprise id), whose rules an ask is held to.
WorkspaceGatekeepers: TypeAlias = Callable[[str | None, str | None], Awaitable[Gatekeeper]]

NOT_HERE = "Sorry, threadgate doesn't answer you about messages here."
# The longest the modal may take to open: the trigger expires 3 s after the press.
OPEN_SECONDS = 2.5
# What Slack's refusal of `views.open` means for the press.
_REFUSED = {"exchanged_trigger_id": "duplicate", "expired_trigger_id": "expired"}


class Shortcuts:
    """A press opens the modal; a submission is admitted (module docstring)."""

    def __init__(
        self, gatekeepers: WorkspaceGatekeepers, clients: SlackClients, metrics: Metrics
    ) -> None:
        self._gatekeepers = gatekeepers
        self._clients = clients
        self._metrics = metrics

    async def pressed(self, payload: dict[str, Any], tenant: Tenant) -> str:
        """Open the modal (or say why not) for the press in `payload`; its outcome."""
        press = shortcut_press(payload)
        gatekeeper = await self._gatekeepers(tenant.installed_team, tenant.enterprise)
        ours = allowed(
            gatekeeper.settings.policy, team=tenant.team, user=press.user, message=press.message
        )
        view = ask_modal(press.message) if ours else refusal_modal(NOT_HERE)
        client = await self._clients.for_team(tenant.installed_team, tenant.enterprise)
        outcome = await _open(client, press.trigger_id, view)
        if outcome == "opened" and not ours:
            outcome = "refused"
        self._metrics.shortcut("press", outcome)
        return outcome

    async def submitted(
        self, payload: dict[str, Any], tenant: Tenant, *, bot_user_id: str | None
    ) -> str:
        """Admit the request the submission in `payload` carries; its outcome."""
        submission = ask_submission(payload)
        gatekeeper = await self._gatekeepers(tenant.installed_team, tenant.enterprise)
        client = await self._clients.for_team(tenant.installed_team, tenant.enterprise)
        ask = Ask(tenant.team, submission, tenant.enterprise)
        admitted, in_dm = await Asks(gatekeeper, client).admit(ask, bot_user_id=bot_user_id)
        outcome = "in_dm" if admitted == "admitted" and in_dm else admitted
        self._metrics.shortcut("submit", outcome)
        return outcome


async def _open(client: AsyncWebClient, trigger_id: str, view: dict[str, Any]) -> str:
    """`views.open` with the press's trigger: opened, or why not."""
    try:
        async with slack_deadline("views.open", OPEN_SECONDS):
            await client.views_open(trigger_id=trigger_id, view=view)
    except SlackRefused as refused:
        outcome = _REFUSED.get(refused.error, "failed")
        log.log(
            logging.INFO if outcome == "duplicate" else logging.WARNING,
            "the shortcut's modal was not opened: %s",
            refused.error,
        )
        return outcome
    except SlackError as failure:
        log.warning("the shortcut's modal was not opened: %s", failure.reason)
        return "failed"
    return "opened"
