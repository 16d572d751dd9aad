"""A loopback Slack Socket Mode server, reached by the real slack-sdk client over a WebSocket.

Socket Mode turns Slack's Events API around: the app calls `apps.connections.open` with its
app-level token (FakeSlack answers that once a `FakeSocketMode` is attached), opens the
WebSocket URL it got back, and Slack pushes envelopes down the socket; the app acks each
envelope by sending `{"envelope_id": …}` back. An envelope that is not acked is delivered
again. This server speaks that protocol, so tests can check *when* (and whether) the
gateway acks::

    async with FakeSocketMode() as sockets:
        slack.socket_mode = sockets                       # FakeSlack issues our URLs
        ...                                               # start the gateway
        [link] = await sockets.wait_for_connections(1)
        envelope_id = await sockets.deliver(event_callback(app_mention_event()))
        ack = await sockets.wait_for_ack(envelope_id)

What it does, as Slack does: a `hello` on connect; `events_api` envelopes with
`retry_attempt`/`retry_reason`; `interactive` envelopes carrying an interaction payload
(a click: `deliver_interactive`); `disconnect` messages (`refresh_requested`, `warning`);
several simultaneous connections; single-use tickets. What a test can add: `drop(link)`
cuts a connection without a close frame (a network failure), `close_link(link)` closes it
cleanly, `send_text` pushes any frame (malformed ones included), `on_ack` runs at the
moment an ack arrives, before it is recorded, and `greet = False` makes new connections
wait for `hello(link)` (a Slack that accepts the WebSocket but never greets).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import WSMsgType, web

from . import WAIT_SECONDS


@dataclass(frozen=True, slots=True)
class Ack:
    """An envelope ack as it arrived: which envelope, on which connection, with what payload."""

    envelope_id: str
    link: int
    payload: Mapping[str, Any] | None


@dataclass(eq=False)
class Link:
    """One WebSocket connection from the app; `number` counts from 1 in connect order."""

    number: int
    ws: web.WebSocketResponse
    transport: asyncio.BaseTransport | None
    received: list[dict[str, Any]] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return not self.ws.closed


class FakeSocketMode:
    """Slack's Socket Mode endpoint on 127.0.0.1, with a record of connections and acks."""

    def __init__(self, *, app_id: str = "A0APP00001") -> None:
        self.app_id = app_id
        self.links: list[Link] = []
        self.acks: list[Ack] = []
        self.on_ack: Callable[[Ack], Awaitable[None]] | None = None
        self.greet = True  # False: new connections get no hello until `hello(link)`
        self._tickets: set[str] = set()
        self._numbers = itertools.count(1)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._base: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/link/", self._connect)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self._base = f"ws://{host}:{port}/link/"

    async def close(self) -> None:
        """Close every open connection (clean close frames), then stop the server."""
        for link in self.open_links:
            await link.ws.close(code=1001, message=b"server shutting down")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeSocketMode:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def issue_url(self) -> str:
        """A fresh single-use WebSocket URL, as `apps.connections.open` returns it."""
        if self._base is None:
            raise RuntimeError("FakeSocketMode is not running; use `async with FakeSocketMode()`")
        ticket = secrets.token_hex(8)
        self._tickets.add(ticket)
        return f"{self._base}?ticket={ticket}&app_id={self.app_id}"

    # -- driving -----------------------------------------------------------------------------

    @property
    def open_links(self) -> list[Link]:
        return [link for link in self.links if link.open]

    async def deliver(
        self,
        payload: Any,
        *,
        to: Link | None = None,
        envelope_id: str | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
    ) -> str:
        """Push an `events_api` envelope (to the newest open connection unless `to` is given);
        returns its envelope id. Pass the same `envelope_id` again to redeliver it. The
        payload is normally an event_callback object; any JSON value is sent as given."""
        link = to or self._newest_open()
        envelope_id = envelope_id or secrets.token_hex(12)
        await link.ws.send_json(
            {
                "envelope_id": envelope_id,
                "type": "events_api",
                "payload": dict(payload) if isinstance(payload, Mapping) else payload,
                "accepts_response_payload": False,
                "retry_attempt": retry_attempt,
                "retry_reason": retry_reason,
            }
        )
        return envelope_id

    async def deliver_interactive(
        self, payload: Mapping[str, Any], *, to: Link | None = None
    ) -> str:
        """Push an `interactive` envelope (a click's `block_actions` payload, as
        tests/fakes/slack_events.py builds it); returns its envelope id."""
        link = to or self._newest_open()
        envelope_id = secrets.token_hex(12)
        await link.ws.send_json(
            {
                "envelope_id": envelope_id,
                "type": "interactive",
                "payload": dict(payload),
                "accepts_response_payload": False,
            }
        )
        return envelope_id

    async def send_text(self, text: str, *, to: Link | None = None) -> None:
        """Push a text frame exactly as given (not necessarily JSON, nor an envelope)."""
        await (to or self._newest_open()).ws.send_str(text)

    async def disconnect(self, link: Link, reason: str = "refresh_requested") -> None:
        """Ask the app to reconnect, as Slack does before it retires a connection."""
        debug = {"host": f"applink-fake-{link.number}"}
        await link.ws.send_json({"type": "disconnect", "reason": reason, "debug_info": debug})

    async def hello(self, link: Link) -> None:
        """Greet a connection that was opened while `greet` was False."""
        await link.ws.send_json(self._hello())

    async def close_link(self, link: Link) -> None:
        """Close a connection cleanly (a close frame), as Slack does after `disconnect`."""
        await link.ws.close(code=1001, message=b"link closed by server")

    def drop(self, link: Link) -> None:
        """Cut a connection without a close frame: to the app it looks like a network failure."""
        if isinstance(link.transport, asyncio.Transport):
            link.transport.abort()

    # -- inspecting --------------------------------------------------------------------------

    def acked(self, envelope_id: str) -> bool:
        return any(a.envelope_id == envelope_id for a in self.acks)

    # The deadline is part of the helper's contract (a hang becomes a readable failure).
    async def wait_for_ack(self, envelope_id: str, timeout: float = WAIT_SECONDS) -> Ack:  # noqa: ASYNC109
        """Wait until the app acks `envelope_id`; returns the first ack for it."""
        await self.wait_until(lambda: self.acked(envelope_id), timeout, what=f"ack {envelope_id}")
        return next(a for a in self.acks if a.envelope_id == envelope_id)

    async def wait_for_connections(self, n: int, timeout: float = WAIT_SECONDS) -> list[Link]:  # noqa: ASYNC109
        """Wait until at least `n` connections are open; returns the open ones, oldest first."""
        await self.wait_until(lambda: len(self.open_links) >= n, timeout, what=f"{n} connection(s)")
        return self.open_links

    async def wait_until(
        self,
        predicate: Callable[[], bool],
        timeout: float = WAIT_SECONDS,  # noqa: ASYNC109 - see wait_for_ack
        *,
        what: str = "condition",
    ) -> None:
        """Wait, re-checking after every connection change and message, until `predicate()`."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(predicate)
        except TimeoutError:
            raise AssertionError(
                f"FakeSocketMode: timed out after {timeout}s waiting for {what}.\n{self.describe()}"
            ) from None

    def describe(self) -> str:
        links = ", ".join(f"#{k.number}({'open' if k.open else 'closed'})" for k in self.links)
        acks = ", ".join(f"{a.envelope_id}@#{a.link}" for a in self.acks)
        return f"connections: {links or '(none)'}\nacks: {acks or '(none)'}"

    # -- WebSocket ---------------------------------------------------------------------------

    async def _connect(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid or used ticket")
        self._tickets.discard(ticket)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        link = Link(next(self._numbers), ws, request.transport)
        self.links.append(link)
        if self.greet:
            await ws.send_json(self._hello())
        await self._notify()
        try:
            await self._read(link)
        finally:
            await self._notify()
        return ws

    def _hello(self) -> dict[str, Any]:
        return {
            "type": "hello",
            "num_connections": len(self.open_links),
            "debug_info": {
                "host": "applink-fake",
                "build_number": 1,
                "approximate_connection_time": 18060,
            },
            "connection_info": {"app_id": self.app_id},
        }

    async def _read(self, link: Link) -> None:
        async for message in link.ws:
            if message.type != WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            link.received.append(data)
            if isinstance(data, dict) and "envelope_id" in data:
                await self._record_ack(
                    Ack(str(data["envelope_id"]), link.number, data.get("payload"))
                )
            await self._notify()

    async def _record_ack(self, ack: Ack) -> None:
        if self.on_ack is not None:
            await self.on_ack(ack)
        self.acks.append(ack)

    def _newest_open(self) -> Link:
        links = self.open_links
        if not links:
            raise AssertionError(f"FakeSocketMode: no open connection.\n{self.describe()}")
        return links[-1]

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
