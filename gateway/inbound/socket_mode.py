"""Socket Mode: Slack events over a WebSocket the gateway opens, through the same bolt app.

The events go through the bolt app HTTP uses (`build_bolt_app`), so the gatekeeper, the
ignore rules and the dedupe in Postgres are the same; this module only translates between
envelopes and bolt, like the HTTP adapter.

**The envelope ack is sent only once the event is durable.** Socket Mode's ack is the
HTTP 200 of the Events API: Slack redelivers an envelope that is not acked. We checked the
path in slack-bolt 1.30 / slack-sdk 3.48:

* `run_async_bolt_app` builds an `AsyncBoltRequest(mode="socket_mode")` and awaits
  `AsyncApp.async_dispatch`, which returns a `BoltResponse` without sending anything.
* The app runs with `process_before_response=True`, so `AsyncioListenerRunner.run` awaits
  our listener to the end (admission committed) before it returns the ack's response; an
  exception in the listener (the database is down) sets status 500 and our `@app.error`
  handler makes it 503 (400 for a malformed event).
* bolt's own `send_async_response` acks only a status of 200, and logs anything else.
  We do not rely on that: `_respond` below sends the ack itself, for a 200 (or the 400 of a
  malformed event, see below) only, so a failed admission is never acked and Slack
  delivers the event again. Acks carry no payload: Events API envelopes take none.

The one path that acks without our listener is bolt's `IgnoringSelfEvents` middleware (the
bot's own events): nothing to store, so nothing to lose. A request no listener takes
(bolt's 404) or an authorization failure (`auth.test` refused) is not acked either.

Interactive envelopes (a click on our buttons, gateway/inbound/interactions.py) go the
same way: through bolt to its action listener, acked once the click is stored. So do
`slash_commands` envelopes (gateway/inbound/slash.py): their ack carries the answer as its
`payload` (the JSON bolt's ack wrote, as bolt's own adapter sends it), which Slack shows the
person; an envelope never acked is what makes Slack say "app did not respond".

**A malformed payload is acked, and refused.** Envelopes get the shape check HTTP bodies
get (`gateway.slack.events.check_shape`) before bolt sees them: a payload that is not an object,
or whose fields bolt reads have the wrong type, would raise inside slack-sdk or bolt (a
traceback per delivery, and no ack). Not acking would only make Slack deliver the same
bytes again, to be refused again: nothing is lost by acking, since nothing in it can be
stored. So such an envelope is acked at once, counted as `rejected` and logged as one
warning line; so is one our listener refuses as malformed (bolt's 400, from
`MalformedEvent`). HTTP answers the same payloads 400. A frame that is not JSON at all has
no envelope id to ack: it is logged and dropped.

**Reconnects** are slack-sdk's: a `disconnect` envelope (`refresh_requested`, `warning`)
makes the client fetch a new URL with `apps.connections.open` and switch to it; a socket
that closes, or stops answering pings, is replaced by its monitor within `ping_interval`.
An ack whose socket has gone is lost; Slack redelivers and the dedupe answers it once.
Several processes may each hold a connection; nothing here assumes it is the only one.

**Health.** The connection is up when the WebSocket slack-sdk holds now is the one that
said `hello` (Slack's greeting on a live link) and slack-sdk still counts it connected (not
closed, answering pings). `/readyz` answers 503 while it is not: after a drop, during a
reconnect, until the new link says hello; `threadgate_socket_mode_connected{app}` says 0. At start-up `start_socket_mode` waits for that
hello within `connect_timeout`: slack-sdk would otherwise retry a WebSocket that never
opens forever, and a gateway that cannot hear Slack must not look started.

**Supervision.** slack-sdk handles each envelope in a task it does not keep (fire and
forget). Our client keeps them, so `close` lets admissions in flight finish (their acks
may be lost: redelivered, deduped) and cancels what is still running after a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import aiohttp
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app
from slack_bolt.async_app import AsyncApp
from slack_bolt.response import BoltResponse
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from agent import ConfigError
from gateway.inbound.interactions import check_interaction
from gateway.slack.codes import Meaning
from gateway.slack.commands import slash_command
from gateway.slack.errors import SlackOutcomeUnknown, SlackRefused, slack_call, slack_failure
from gateway.slack.events import MalformedEvent, check_shape
from gateway.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

_CONNECTIONS_OPEN = "apps.connections.open"
# What a failure on the Socket Mode WebSocket itself names as its method: it has none.
_WEBSOCKET = "websocket"


class SocketModeConnection:
    """A live Socket Mode connection feeding `bolt`; `close` it on shutdown."""

    def __init__(self, client: _SupervisedClient, *, grace_seconds: float) -> None:
        self._client = client
        self._grace = grace_seconds

    async def is_connected(self) -> bool:
        """Whether Slack can deliver events to us now (see "Health" above)."""
        return await self._client.is_greeted()

    async def close(self) -> None:
        """Stop reconnecting, close the socket, let envelopes in flight finish (bounded)."""
        client = self._client
        await client.close()  # type: ignore[no-untyped-call]  # slack-sdk leaves it unannotated
        await _settle(client.handling, self._grace)
        loops = [client.message_processor, client.current_session_monitor, client.message_receiver]
        await _settle({f for f in loops if f is not None}, 0)


async def start_socket_mode(
    bolt: AsyncApp,
    *,
    app_token: str,
    api_url: str,
    metrics: Metrics | None = None,
    ping_interval: float = 10,
    grace_seconds: float = 5,
    connect_timeout: float,
) -> SocketModeConnection:
    """Connect to Slack with `app_token` (`apps.connections.open` goes to `api_url`) and feed
    every envelope to `bolt`. A token Slack refuses, or a connection that has not said
    hello within `connect_timeout` seconds, is a ConfigError."""
    client = _SupervisedClient(
        app_token=app_token,
        logger=log,
        web_client=_connections_client(api_url),
        ping_interval=ping_interval,
        metrics=metrics,
    )
    client.socket_mode_request_listeners.append(_Responder(bolt, metrics).handle)
    connection = SocketModeConnection(client, grace_seconds=grace_seconds)
    try:
        async with asyncio.timeout(connect_timeout):
            client.wss_uri = await _open_url(client)
            await client.connect()  # type: ignore[no-untyped-call]  # slack-sdk leaves it unannotated
            await client.greeted.wait()
    except TimeoutError:
        await connection.close()
        raise ConfigError(_never_connected(client, connect_timeout)) from None
    except BaseException:
        await connection.close()
        raise
    if metrics is not None:
        metrics.watch_socket_mode(client.app_id, client.up)
    return connection


def _never_connected(client: _SupervisedClient, timeout: float) -> str:
    stage = "no hello came over the WebSocket" if client.wss_uri else "no URL came back"
    return (
        f"The Socket Mode connection did not open within {timeout:g} s ({stage}): check "
        "SLACK_APP_TOKEN and that this host reaches Slack (wss-primary.slack.com), or raise "
        "THREADGATE_SOCKET_CONNECT_TIMEOUT."
    )


class _SupervisedClient(SocketModeClient):
    """slack-sdk's aiohttp client, keeping a reference to every message task it starts and
    refusing (with an ack) the envelopes bolt could not read."""

    def __init__(self, *, metrics: Metrics | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.handling: set[asyncio.Future[None]] = set()
        self._metrics = metrics
        self.greeted = asyncio.Event()  # set by the first hello
        self._greeted_by: object = None  # the WebSocket that said hello last
        self.app_id = "unknown"  # as the hello says (`connection_info.app_id`)

    async def is_greeted(self) -> bool:
        """The current WebSocket said hello and slack-sdk counts it connected."""
        current = self.current_session
        return current is not None and current is self._greeted_by and await self.is_connected()

    def up(self) -> bool:
        """`is_greeted` without awaiting, for the connection gauge (read when scraped, from
        the metrics listener's thread: it only reads attributes)."""
        current, last_pong = self.current_session, self.last_ping_pong_time
        failing = last_pong is not None and time.time() - last_pong >= self.ping_interval * 4
        return (
            current is not None
            and current is self._greeted_by
            and not (self.closed or self.stale or current.closed or failing)
        )

    async def enqueue_message(self, message: str) -> None:
        # Here, in the receiving loop of the socket the frame came on (process_message runs
        # later, when a reconnect may have replaced the socket). A hello is a few hundred
        # bytes, so only small frames are parsed twice; events are parsed once, later.
        if len(message) <= _HELLO_BYTES and (hello := _greeting(message)) is not None:
            self._greeted_by = self.current_session
            info = hello.get("connection_info")
            app_id = info.get("app_id") if isinstance(info, dict) else None
            self.app_id = app_id if isinstance(app_id, str) and app_id else self.app_id
            self.greeted.set()
        await super().enqueue_message(message)

    async def process_message(self) -> None:
        raw = await self.message_queue.get()
        if raw is None:
            return
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            log.warning("Socket Mode frame that is not JSON dropped (%d characters)", len(raw))
            return
        if not isinstance(message, dict):
            log.warning("Socket Mode frame that is not a JSON object dropped")
            return
        problem = envelope_problem(message)
        work = (
            self.run_message_listeners(message, raw)
            if problem is None
            else self._refuse(message, problem)
        )
        task = asyncio.ensure_future(work)
        self.handling.add(task)
        task.add_done_callback(self.handling.discard)

    async def _refuse(self, message: Mapping[str, Any], problem: str) -> None:
        if self._metrics is not None:
            self._metrics.events.labels("rejected").inc()
        envelope_id = message.get("envelope_id")
        if not isinstance(envelope_id, str) or not envelope_id:
            log.warning("Socket Mode envelope without an envelope id dropped (%s)", problem)
            return
        log.warning("envelope %s refused and acked (%s)", envelope_id, problem)
        await _ack(self, envelope_id)


# Larger than any hello Slack sends (about 300 bytes: type, num_connections, debug_info,
# connection_info).
_HELLO_BYTES = 4096


def _greeting(frame: str) -> Mapping[str, Any] | None:
    """The frame as Slack's hello, or None when it is not one."""
    try:
        message = json.loads(frame)
    except (ValueError, RecursionError):
        return None
    return message if isinstance(message, dict) and message.get("type") == "hello" else None


def _is_hello(frame: str) -> bool:
    return _greeting(frame) is not None


def envelope_problem(message: Mapping[str, Any]) -> str | None:
    """Why bolt cannot be given this Socket Mode message, or None when it can. Messages
    without an envelope id (`hello`, `disconnect`) are slack-sdk's and pass."""
    if "envelope_id" not in message:
        return None
    if not isinstance(message.get("envelope_id"), str) or not isinstance(message.get("type"), str):
        return "the envelope id and type must be strings"
    payload = message.get("payload")
    if not isinstance(payload, dict):
        return "the payload must be a JSON object"
    if message["type"] == "events_api":
        try:
            check_shape(payload)
        except MalformedEvent as exc:
            return f"malformed event: {exc}"
    if message["type"] == "interactive":
        try:
            check_interaction(payload)
        except MalformedEvent as exc:
            return f"malformed interaction: {exc}"
    if message["type"] == "slash_commands":
        try:
            slash_command(payload)
        except MalformedEvent as exc:
            return f"malformed slash command: {exc}"
    return None


class _Responder:
    """Runs one envelope through bolt and acks it only if bolt answered 200."""

    def __init__(self, bolt: AsyncApp, metrics: Metrics | None) -> None:
        self._bolt = bolt
        self._metrics = metrics

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        started = time.perf_counter()
        response: BoltResponse = await run_async_bolt_app(self._bolt, req)
        await self._respond(client, req, response)
        if self._metrics is not None:
            self._metrics.ack_seconds.observe(time.perf_counter() - started)

    async def _respond(
        self, client: AsyncBaseSocketModeClient, req: SocketModeRequest, response: BoltResponse
    ) -> None:
        if response.status == 400:
            # Only our `@app.error` answers 400, for a MalformedEvent: refused for good.
            log.warning("envelope %s refused and acked (%s)", req.envelope_id, response.body)
        elif response.status != 200:
            log.warning(
                "envelope %s not acked (%d %s); Slack will deliver it again",
                req.envelope_id,
                response.status,
                response.body,
            )
            return
        await _ack(client, req.envelope_id, _ack_payload(response))


def _ack_payload(response: BoltResponse) -> dict[str, Any] | None:
    """What bolt's ack wrote for Slack (a slash command's answer), None when nothing: an
    event's ack has an empty body."""
    if response.status != 200 or not response.body:
        return None
    try:
        body = json.loads(response.body)
    except ValueError:
        return {"text": response.body}
    return body if isinstance(body, dict) else None


async def _ack(
    client: AsyncBaseSocketModeClient, envelope_id: str, payload: dict[str, Any] | None = None
) -> None:
    """Ack an envelope, with the payload Slack shows for a slash command (Events API
    envelopes take none); a lost ack is logged, Slack redelivers and the dedupe answers it
    once."""
    try:
        response = SocketModeResponse(envelope_id=envelope_id, payload=payload)
        await client.send_socket_mode_response(response)
    except Exception as exc:
        if (failure := slack_failure(exc, _WEBSOCKET)) is None:
            raise
        log.info("ack for envelope %s lost (%s); Slack will redeliver", envelope_id, failure.reason)


def _connections_client(api_url: str) -> AsyncWebClient:
    """The Web API client for `apps.connections.open`: `SLACK_API_URL` like every other call.
    slack-sdk passes the app token with each call, so the client holds no token; a rate
    limit is waited out by slack-sdk itself (it honors Retry-After on this endpoint). A
    plain slack-sdk client (slack-sdk's reconnects call it too): our callers map its errors
    with `_connections_open`."""
    return AsyncWebClient(
        base_url=api_url if api_url.endswith("/") else api_url + "/",
        timeout=15,
        # Asking for a URL twice is harmless, so connection errors are retried too.
        retry_handlers=[AsyncConnectionErrorRetryHandler(), AsyncServerErrorRetryHandler()],
    )


@contextlib.contextmanager
def _connections_open() -> Iterator[None]:
    """Around `apps.connections.open`: its failure raised as its outcome
    (`gateway.slack.errors`), or as a ConfigError naming SLACK_APP_TOKEN when Slack refused
    that token itself."""
    try:
        with slack_call(_CONNECTIONS_OPEN):
            yield
    except SlackRefused as refused:
        if refused.meaning is Meaning.TOKEN_REFUSED:
            raise ConfigError(
                f"SLACK_APP_TOKEN was refused by Slack ({refused.error}): put an app-level "
                "token (xapp-…) with the connections:write scope there."
            ) from refused
        raise


async def _open_url(client: SocketModeClient) -> str:
    with _connections_open():
        return await client.issue_new_wss_url()


async def probe_socket_mode(*, app_token: str, api_url: str) -> int:
    """Open a Socket Mode connection, wait for its hello, close it (for `threadgate doctor`);
    return how many connections the app has open, this one included. The caller bounds the
    time. Nothing is acked: an event Slack sends here meanwhile is delivered again. A
    failure raises its outcome (`gateway.slack.errors`)."""
    with _connections_open():
        response = await _connections_client(api_url).apps_connections_open(app_token=app_token)
    with slack_call(_WEBSOCKET):
        return await _hello(response["url"])


async def _hello(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        async for frame in ws:
            if frame.type == aiohttp.WSMsgType.TEXT and _is_hello(frame.data):
                return int(json.loads(frame.data).get("num_connections") or 1)
    raise SlackOutcomeUnknown(_WEBSOCKET, "closed before hello")


async def _settle(futures: set[asyncio.Future[None]], grace: float) -> None:
    """Wait up to `grace` seconds for `futures`, then cancel the rest and wait for them."""
    pending = set(futures)
    if pending and grace > 0:
        _, pending = await asyncio.wait(pending, timeout=grace)
    for future in pending:
        future.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
