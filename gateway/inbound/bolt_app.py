"""The slack-bolt app: verification, url_verification and dispatch, then our gatekeeper.

Bolt runs with `process_before_response=True`: the HTTP response (the ack) is sent only
after our listener returned, that is after the turn and its task are committed. Bolt's
default — ack first, work in the background — would lose an acked event on a crash.
Every event goes to one listener that asks `pin_change` whether it pins or unpins a
message (gateway/inbound/pins.py), `inbound_change` whether it edits or deletes one
(gateway/inbound/revisions.py applies it), and otherwise `inbound_turn` whether it concerns us.
An `agent_session_stopped` (Slack's Stop button) goes to `stops`
(gateway/inbound/stops.py), stored before the ack like an admission; the DM with the app
opened (`app_home_opened`, messages tab) to `app_home` (its suggested prompts). Clicks on
our buttons (`block_actions` interaction payloads: approvals and feedback) go to one action
listener, which stores what they decide (gateway/inbound/interactions.py) before it acks.
Socket Mode goes through this same app, so both modes see the same rules.

With many workspaces (OAuth mode), authorization finds the event's installation
(`gateway.slack.oauth.InstalledIdentity`), the listener works through the gatekeeper, pins and
revisions of the event's tenant — the installation the delivery is for, its
`authorizations` (`gateway.slack.events.event_tenant`), not the envelope's team, which in a
Slack Connect channel is the writer's — with that installation's token, and an
`app_uninstalled` or a `tokens_revoked` naming bot tokens goes to `on_uninstalled`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
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
from gateway.inbound.interactions import Interactions
from gateway.inbound.pins import Pins, pin_change
from gateway.inbound.revisions import Revisions
from gateway.inbound.stops import Stops
from gateway.slack.events import (
    MalformedEvent,
    Tenant,
    event_tenant,
    inbound_turn,
    messages_opened,
    session_stopped,
)
from gateway.slack.interactive import ACTION_IDS
from gateway.telemetry.metrics import Metrics
from storage import StorageError

log = logging.getLogger(__name__)

# The gatekeeper of a workspace (team id, enterprise id): one per workspace with many.
Gatekeepers: TypeAlias = Callable[[str | None, str | None], Awaitable[Gatekeeper]]
# Called with (team id, enterprise id, is an org-wide install) when the app leaves one.
Uninstalled: TypeAlias = Callable[[str | None, str | None, bool], Awaitable[None]]
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
    gatekeeper: Gatekeeper | Gatekeepers,
    metrics: Metrics,
    identity: AuthorizeResult | None = None,
    pins: WorkspacePins | None = None,
    revisions: WorkspaceRevisions | None = None,
    authorize: AsyncAuthorize | None = None,
    on_uninstalled: Uninstalled | None = None,
    interactions: Interactions | None = None,
    stops: Stops | None = None,
    app_home: AppHome | None = None,
) -> AsyncApp:
    app = _app(client, signing_secret, identity, authorize)

    async def gatekeeper_of(tenant: Tenant) -> Gatekeeper:
        if isinstance(gatekeeper, Gatekeeper):
            return gatekeeper
        return await gatekeeper(tenant.installed_team, tenant.enterprise)

    @app.event(re.compile(".+"))
    async def on_event(body: dict[str, Any], context: AsyncBoltContext, ack: AsyncAck) -> None:
        event = body.get("event")
        tenant = event_tenant(body)
        if on_uninstalled is not None and isinstance(event, dict) and uninstalls(event):
            await on_uninstalled(tenant.installed_team, tenant.enterprise, tenant.org_wide)
            metrics.events.labels("uninstalled").inc()
            await ack()
            return
        pin = pin_change(body)
        if pin is not None:
            kept = (
                "ignored"
                if pins is None
                else await (await pins(tenant.installed_team, tenant.enterprise)).apply(
                    pin, bot_user_id=context.bot_user_id
                )
            )
            metrics.pin_settled(kept)
        else:
            metrics.events.labels(await _handle(body, tenant, context.bot_user_id)).inc()
        await ack()

    async def _handle(body: dict[str, Any], tenant: Tenant, bot_user_id: str | None) -> str:
        stop = session_stopped(body)
        if stop is not None:  # Slack's Stop button (gateway/inbound/stops.py)
            return "ignored" if stops is None else await stops.apply(stop)
        home = messages_opened(body)
        if home is not None:  # the DM with the app opened (gateway/inbound/app_home.py)
            return "ignored" if app_home is None else await app_home.opened(home)
        change = inbound_change(body)
        if change is not None:
            if revisions is None:
                return "ignored"
            revising = await revisions(tenant.installed_team, tenant.enterprise)
            return await revising.apply(change, bot_user_id=bot_user_id)
        turn = inbound_turn(body)
        if turn is None:
            return "ignored"
        return await (await gatekeeper_of(tenant)).admit(turn, bot_user_id=bot_user_id)

    if interactions is not None:
        _listen_for_clicks(app, interactions)

    _answer_errors(app, metrics)
    return app


def _app(
    client: AsyncWebClient,
    signing_secret: str | None,
    identity: AuthorizeResult | None,
    authorize: AsyncAuthorize | None,
) -> AsyncApp:
    """Bolt's app, acking only when a listener says so (after admission has committed)."""
    return AsyncApp(
        client=client,
        signing_secret=signing_secret,
        process_before_response=True,
        request_verification_enabled=signing_secret is not None,
        # bolt's annotation leaves out the None it handles (not installed: refused).
        authorize=KnownIdentity(identity) if identity is not None else cast(Any, authorize),
    )


def _answer_errors(app: AsyncApp, metrics: Metrics) -> None:
    """What Slack is answered when an event was not admitted: a malformed event is
    refused; a database outage and anything else leave it unacked, to be sent again."""

    @app.error
    async def on_error(error: Exception, response: BoltResponse) -> None:
        if isinstance(error, MalformedEvent):
            metrics.events.labels("rejected").inc()
            response.status, response.body = 400, f"malformed event: {error}"
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
