"""The slack-bolt app: verification, url_verification and dispatch, then our gatekeeper.

Bolt runs with `process_before_response=True`: the HTTP response (the ack) is sent only
after our listener returned, that is after the turn and its task are committed. Bolt's
default — ack first, work in the background — would lose an acked event on a crash.
Every event goes to one listener that asks `pin_change` whether it pins or unpins a
message (gateway/pins.py), `inbound_change` whether it edits or deletes one
(gateway/revisions.py applies it), and otherwise `inbound_turn` whether it concerns us.
Socket Mode goes through this same app, so both modes see the same rules.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from gateway.edits import inbound_change
from gateway.gatekeeper import Gatekeeper
from gateway.inbound import MalformedEvent, inbound_turn
from gateway.metrics import Metrics
from gateway.pins import Pins, pin_change
from gateway.revisions import Revisions
from storage import StorageError

log = logging.getLogger(__name__)


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
    gatekeeper: Gatekeeper,
    metrics: Metrics,
    identity: AuthorizeResult | None = None,
    pins: Pins | None = None,
    revisions: Revisions | None = None,
) -> AsyncApp:
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        process_before_response=True,
        request_verification_enabled=signing_secret is not None,
        authorize=KnownIdentity(identity) if identity is not None else None,
    )

    @app.event(re.compile(".+"))
    async def on_event(body: dict[str, Any], context: AsyncBoltContext, ack: AsyncAck) -> None:
        pin = pin_change(body)
        if pin is not None:
            kept = (
                "ignored"
                if pins is None
                else await pins.apply(pin, bot_user_id=context.bot_user_id)
            )
            metrics.pin_settled(kept)
        else:
            metrics.events.labels(await _handle(body, context.bot_user_id)).inc()
        await ack()

    async def _handle(body: dict[str, Any], bot_user_id: str | None) -> str:
        change = inbound_change(body)
        if change is not None:
            return (
                "ignored"
                if revisions is None
                else await revisions.apply(change, bot_user_id=bot_user_id)
            )
        turn = inbound_turn(body)
        return "ignored" if turn is None else await gatekeeper.admit(turn, bot_user_id=bot_user_id)

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

    return app
