"""The slack-bolt app: verification, url_verification and dispatch, then our gatekeeper.

Bolt runs with `process_before_response=True`: the HTTP response (the ack) is sent only
after our listener returned, that is after the turn and its task are committed. Bolt's
default — ack first, work in the background — would lose an acked event on a crash.
Every event goes to one listener that asks `pin_change` whether it pins or unpins a
message (gateway/inbound/pins.py), `inbound_change` whether it edits or deletes one
(gateway/inbound/revisions.py applies it), and otherwise `inbound_turn` whether it concerns us.
An `agent_session_stopped` (Slack's Stop button) goes to `stops`
(gateway/inbound/stops.py), stored before the ack like an admission; the DM with the app
opened (`app_home_opened`, messages tab) to `app_home` (its suggested prompts), the Home
tab opened to `home` (gateway/inbound/home_tab.py). Clicks on our buttons (`block_actions`
interaction payloads: approvals and feedback) go to one action listener, which stores what
they decide (gateway/inbound/interactions.py) before it acks; the Home view's buttons to
another (`home`); the message shortcut and its modal's submission to theirs
(gateway/inbound/shortcuts.py). The slash command goes to `commands`
(gateway/inbound/slash.py), whose answer rides on the ack.
Socket Mode goes through this same app, so both modes see the same rules.

With many workspaces (OAuth mode), authorization finds the event's installation
(`gateway.slack.oauth.InstalledIdentity`), the listener works through the gatekeeper, pins and
revisions of the event's tenant — the installation the delivery is for, its
`authorizations` (`gateway.slack.events.event_tenant`), not the envelope's team, which in a
Slack Connect channel is the writer's — with that installation's token. In both modes an
`app_uninstalled` or a `tokens_revoked` naming bot tokens goes to `on_uninstalled`
(gateway/slack/uninstall.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from gateway.inbound.app_home import AppHome
from gateway.inbound.edits import inbound_change
from gateway.inbound.gatekeeper import Gatekeeper
from gateway.inbound.home_tab import HomeTab
from gateway.inbound.interactions import Interactions
from gateway.inbound.pins import PinChange, Pins, pin_change
from gateway.inbound.revisions import Revisions
from gateway.inbound.shortcuts import Shortcuts
from gateway.inbound.slash import SlashCommands
from gateway.inbound.stops import Stops
from gateway.slack.commands import slash_command
from gateway.slack.errors import SlackError
from gateway.slack.events import (
    MalformedEvent,
    Tenant,
    event_tenant,
    home_opened,
    inbound_turn,
    messages_opened,
    session_stopped,
)
from gateway.slack.home_view import HOME_ACTION_IDS
from gateway.slack.interactive import ACTION_IDS
from gateway.slack.shortcut import ASK_SHORTCUT, ASK_VIEW
from gateway.telemetry.metrics import Metrics
from storage import StorageError

log = logging.getLogger(__name__)

# The gatekeeper of a workspace (team id, enterprise id): one per workspace with many.
Gatekeepers: TypeAlias = Callable[[str | None, str | None], Awaitable[Gatekeeper]]
# Called with the installation and the delivery's event id when the app leaves a workspace.
Uninstalled: TypeAlias = Callable[[Tenant, str | None], Awaitable[None]]
# Pins and revisions of the event's workspace (team id, enterprise id).
WorkspacePins: TypeAlias = Callable[[str | None, str | None], Awaitable[Pins]]
WorkspaceRevisions: TypeAlias = Callable[[str | None, str | None], Awaitable[Revisions]]


def uninstalls(event: Mapping[str, Any]) -> bool:
    """Whether the event takes our bot away: the app uninstalled, or its bot tokens revoked
    (a revocation of user tokens only leaves the bot working)."""
    if event.get("type") == "app_uninstalled":
        return True
    tokens = event.get("tokens")
    return (
        event.get("type") == "tokens_revoked"
        and isinstance(tokens, dict)
        and bool(tokens.get("bot"))
    )


class KnownIdentity(AsyncAuthorize):
    """Bolt's authorization from the `auth.test` we made at start-up, through our own client.

    Without it, bolt calls `auth.test` itself on the first request, with a client of its
    own that bypasses our metrics and our alarm on a refused token.
    """

    def __init__(self, result: AuthorizeResult) -> None:
        self._result = result

    async def __call__(self, **kwargs: Any) -> AuthorizeResult:
        return self._result


def build_bolt_app(
    *,
    client: AsyncWebClient,
    signing_secret: str | None,
    listeners: Listeners,
    identity: AuthorizeResult | None = None,
    authorize: AsyncAuthorize | None = None,
    interactions: Interactions | None = None,
    shortcuts: Shortcuts | None = None,
    commands: SlashCommands | None = None,
) -> AsyncApp:
    """The app, its listeners and its answer to a failed one (module docstring)."""
    app = _bolt(client, signing_secret, identity, authorize)
    app.event(re.compile(".+"))(listeners.on_event)
    if interactions is not None:
        _listen_for_clicks(app, interactions)
    if shortcuts is not None:
        _listen_for_shortcuts(app, shortcuts)
    if listeners.home is not None:
        _listen_for_home_clicks(app, listeners.home)
    if commands is not None:
        _listen_for_commands(app, commands)
    _answer_failures(app, listeners.metrics)
    return app


def _bolt(
    client: AsyncWebClient,
    signing_secret: str | None,
    identity: AuthorizeResult | None,
    authorize: AsyncAuthorize | None,
) -> AsyncApp:
    """Bolt, acking only after the listener returned; requests verified when there is a
    signing secret (HTTP), authorized by our `auth.test` or by `authorize` (OAuth)."""
    return AsyncApp(
        client=client,
        signing_secret=signing_secret,
        process_before_response=True,
        request_verification_enabled=signing_secret is not None,
        # bolt's annotation leaves out the None it handles (not installed: refused).
        authorize=KnownIdentity(identity) if identity is not None else cast(Any, authorize),
    )


@dataclass(frozen=True, slots=True)
class Listeners:
    """The one event listener: each event goes to the first part that takes it, in the
    module docstring's order, and is acked once that part returned. A part left None
    ignores what it would take (an uninstall is then an ordinary event)."""

    gatekeeper: Gatekeeper | Gatekeepers
    metrics: Metrics
    pins: WorkspacePins | None = None
    revisions: WorkspaceRevisions | None = None
    on_uninstalled: Uninstalled | None = None
    stops: Stops | None = None
    app_home: AppHome | None = None
    home: HomeTab | None = None

    async def on_event(
        self, body: dict[str, Any], context: AsyncBoltContext, ack: AsyncAck
    ) -> None:
        event = body.get("event")
        tenant = event_tenant(body)
        if self.on_uninstalled is not None and isinstance(event, dict) and uninstalls(event):
            event_id = body.get("event_id")
            await self.on_uninstalled(tenant, event_id if isinstance(event_id, str) else None)
            self.metrics.events.labels("uninstalled").inc()
        elif (pin := pin_change(body)) is not None:
            self.metrics.pin_settled(await self._pin(pin, tenant, context.bot_user_id))
        else:
            self.metrics.events.labels(await self._handle(body, tenant, context.bot_user_id)).inc()
        await ack()

    async def _pin(self, pin: PinChange, tenant: Tenant, bot_user_id: str | None) -> str:
        if self.pins is None:
            return "ignored"
        workspace_pins = await self.pins(tenant.installed_team, tenant.enterprise)
        return await workspace_pins.apply(pin, bot_user_id=bot_user_id)

    async def _handle(self, body: dict[str, Any], tenant: Tenant, bot_user_id: str | None) -> str:
        stop = session_stopped(body)
        if stop is not None:  # Slack's Stop button (gateway/inbound/stops.py)
            return "ignored" if self.stops is None else await self.stops.apply(stop)
        home = messages_opened(body)
        if home is not None:  # the DM with the app opened (gateway/inbound/app_home.py)
            return "ignored" if self.app_home is None else await self.app_home.opened(home)
        tab = home_opened(body)
        if tab is not None:  # the Home tab opened (gateway/inbound/home_tab.py)
            return "ignored" if self.home is None else await self.home.opened(tab)
        change = inbound_change(body)
        if change is not None:
            if self.revisions is None:
                return "ignored"
            revising = await self.revisions(tenant.installed_team, tenant.enterprise)
            return await revising.apply(change, bot_user_id=bot_user_id)
        turn = inbound_turn(body)
        if turn is None:
            return "ignored"
        return await (await self._gatekeeper_of(tenant)).admit(turn, bot_user_id=bot_user_id)

    async def _gatekeeper_of(self, tenant: Tenant) -> Gatekeeper:
        if isinstance(self.gatekeeper, Gatekeeper):
            return self.gatekeeper
        return await self.gatekeeper(tenant.installed_team, tenant.enterprise)


def _answer_failures(app: AsyncApp, metrics: Metrics) -> None:
    """A listener that raised: a malformed event is refused for good (400, acked by Socket
    Mode), the database down is 503 and an error of ours 500 (neither acked: redelivered)."""

    @app.error
    async def on_error(error: Exception, response: BoltResponse) -> None:
        if isinstance(error, MalformedEvent):
            metrics.events.labels("rejected").inc()
            response.status, response.body = 400, f"malformed event: {error}"
        elif isinstance(error, SlackError):
            # Not acked: a shortcut's submission that can be answered nowhere (for now).
            log.warning("interaction not admitted: %s", error)
            response.status, response.body = 503, "slack unavailable"
        elif isinstance(error, StorageError):
            # Not acked: Slack will deliver the event again once the database is back.
            log.error("event not admitted: %s", error)
            response.status, response.body = 503, "database unavailable"
        else:
            log.exception("event not admitted", exc_info=error)
            response.status, response.body = 500, "internal error"


def _listen_for_clicks(app: AsyncApp, interactions: Interactions) -> None:
    """Clicks on our buttons: what they decide is stored, then acked (as events are)."""

    @app.action(re.compile(f"^(?:{'|'.join(map(re.escape, ACTION_IDS))})$"))
    async def on_click(body: dict[str, Any], ack: AsyncAck) -> None:
        await interactions.handle(body)
        await ack()


def _listen_for_shortcuts(app: AsyncApp, shortcuts: Shortcuts) -> None:
    """The message shortcut opens its modal; the modal's submission is admitted, then acked
    (gateway/inbound/shortcuts.py)."""

    @app.message_shortcut(ASK_SHORTCUT)
    async def on_press(body: dict[str, Any], context: AsyncBoltContext, ack: AsyncAck) -> None:
        await shortcuts.pressed(body, interaction_tenant(context))
        await ack()

    @app.view_submission(ASK_VIEW)
    async def on_submit(body: dict[str, Any], context: AsyncBoltContext, ack: AsyncAck) -> None:
        tenant = interaction_tenant(context)
        await shortcuts.submitted(body, tenant, bot_user_id=context.bot_user_id)
        await ack()


def interaction_tenant(context: AsyncBoltContext) -> Tenant:
    """The installation an interaction is for, as bolt read it (a view's
    `app_installed_team_id` in a Slack Connect channel, not the clicker's team)."""
    team, enterprise = context.team_id, context.enterprise_id
    if context.is_enterprise_install and enterprise:
        return Tenant(enterprise, enterprise, org_wide=True)
    if team is None:
        raise MalformedEvent("interaction: no team")
    return Tenant(team, enterprise)


def _listen_for_home_clicks(app: AsyncApp, home: HomeTab) -> None:
    """Clicks on the Home view's buttons: what they do is stored, then acked."""

    @app.action(re.compile(f"^(?:{'|'.join(map(re.escape, HOME_ACTION_IDS))})$"))
    async def on_home_click(body: dict[str, Any], ack: AsyncAck) -> None:
        await home.click(body)
        await ack()


def _listen_for_commands(app: AsyncApp, commands: SlashCommands) -> None:
    """The slash command, whatever its name in the app's settings: answered on the ack, to
    the person alone (`ephemeral`)."""

    @app.command(re.compile(".+"))
    async def on_command(body: dict[str, Any], ack: AsyncAck) -> None:
        answer = await commands.respond(slash_command(body))
        await ack(text=answer, response_type="ephemeral")
