"""The HTTP surface: `/slack/events`, `/healthz` and `/readyz` on the events port, and
`/metrics` on a listener of its own.

Metrics name the models, Slack's error codes and the queue depth: nothing for the port that
must face the internet (Slack delivers events to it), so they are served by a second app
(`build_metrics_app`) on `THREADGATE_METRICS_ADDRESS`, loopback unless an operator says
otherwise.

The events route is an adapter and only translates, with one addition: it refuses what
bolt would choke on before bolt sees it, and what is not from Slack before reading it.

* The signing headers are checked first, before a byte of the body is read: missing, or
  older than five minutes, is 401; malformed (not Unix seconds, not `v0=` and 64 hex
  digits, given twice) is 400. Each such refusal, and a signature that does not match, is
  logged with its likely cause, at most once a minute per cause
  (gateway/telemetry/rejections.py). Nothing unauthenticated can reach code that would raise
  on it (slack-sdk's verifier calls `int()` on the timestamp and compares the signature
  as `str`, so "abc", 5,000 digits or a non-ASCII signature used to be a 500).
* The body is read only up to `MAX_BODY_BYTES` (a larger declared length is refused
  without reading at all), then its signature is checked over the raw bytes: 401.
* A body that is not a UTF-8 JSON object of the shape bolt reads is 400. Clicks on our
  buttons come to the same URL as Slack sends every interaction: form-encoded, one
  `payload` field holding the JSON (signed like events); one that is not a `block_actions`
  payload we can read (gateway/inbound/interactions.py) is 400 too. A slash command comes
  form-encoded too, as its fields (`command`, `text`, …): one we cannot read
  (gateway/slack/commands.py) is 400.

Bolt then checks the signature again (cheap) and dispatches; what it answers is what
Slack gets.

With many workspaces (`oauth`, gateway/slack/oauth.py) the same server also serves Slack's
install flow, in both modes: `GET /slack/install` (the "Add to Slack" page, which issues a
one-use `state`) and `GET /slack/oauth_redirect` (where Slack sends the installer back with
a code). bolt's `AsyncOAuthFlow` answers both; these routes only translate.

A worker (`--role worker`, `build_health_app`) serves only `/healthz` and `/readyz`.

In Socket Mode (`events=False`) events arrive over the WebSocket instead, there is no
signing secret, and the server keeps only `/healthz` and `/readyz`; readiness then also
means the WebSocket is up (the `ready` callable the composition root passes says so).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from urllib.parse import parse_qs

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDictProxy
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from gateway.inbound.interactions import check_interaction
from gateway.slack.commands import slash_command
from gateway.slack.events import MalformedEvent, check_shape
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.rejections import MAX_AGE, Cause, Rejection, RejectionLog

Readiness = Callable[[], Awaitable[bool]]

# The largest request Slack sends us is an edit (`message_changed`), which carries the
# message twice (`message` and `previous_message`), each with its text — truncated by
# Slack at 40,000 characters — and the rich_text block that repeats it. Slack writes
# non-ASCII characters as \uXXXX escapes (6 bytes each), so such an edit weighs at most
# about 4 × 40,000 × 6 = 960,000 bytes plus its fields; an ordinary message event weighs
# 2-10 KB. 1 MiB admits every event Slack can send and makes a body cost at most that
# much memory: reading stops one byte past it.
MAX_BODY_BYTES = 1024 * 1024

# Slack's request signing: `X-Slack-Request-Timestamp` is Unix seconds and
# `X-Slack-Signature` is `v0=` and the hex HMAC-SHA256 of `v0:{timestamp}:{body}` under
# the signing secret. Anything else in these headers was not written by Slack. The
# patterns are ASCII on purpose: `int()` also takes "١٢", " 12 " and "1_2".
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
SIGNATURE_HEADER = "X-Slack-Signature"
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")
# Slack's advice, and bolt's: a request signed more than five minutes ago may be a replay.
MAX_AGE_SECONDS = MAX_AGE
# How Slack sends interaction payloads (clicks): `payload=` and the JSON.
_FORM = "application/x-www-form-urlencoded"


_NOT_READY = "not ready: the database is unreachable or migrations are pending"
# In Socket Mode, readiness includes the WebSocket to Slack (gateway/inbound/socket_mode.py).
_NOT_READY_SOCKET = (
    "not ready: the Socket Mode connection to Slack is down or reconnecting, "
    "or the database is unreachable or migrations are pending"
)
# A worker (`--role worker`) takes no events: ready means its task workers run.
_NOT_READY_WORKER = (
    "not ready: the task workers have not started, "
    "or the database is unreachable or migrations are pending"
)


class _QuietProtocolErrors(logging.Filter):
    """aiohttp logs each request it cannot parse (a control character in a header, a line
    too long) at ERROR, with the parser's traceback. On a port open to the internet anyone
    can write those lines, so each becomes one WARNING line without a traceback; the client
    has its 400 already."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            first_line = (str(error.message).strip().splitlines() or ["malformed"])[0].rstrip(":")
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args = "refused a malformed HTTP request: %s", (first_line,)
            record.exc_info = record.exc_text = None
        return True


# The logger our aiohttp servers write to (`web.AppRunner(app, logger=SERVER_LOG)`).
SERVER_LOG = logging.getLogger("gateway.process.http.server")
SERVER_LOG.addFilter(_QuietProtocolErrors())


class Refused(Exception):
    """A request answered without reaching bolt: its status, reason and metrics outcome,
    and for a signing failure its likely cause (gateway/telemetry/rejections.py)."""

    def __init__(
        self, status: int, reason: str, outcome: str, cause: Cause | None = None, skew: float = 0
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.outcome = outcome
        self.rejection = None if cause is None else Rejection(cause, status, reason, skew)


def build_http_app(
    *,
    bolt: AsyncApp,
    signing_secret: str | None,
    ready: Readiness,
    metrics: Metrics,
    events: bool = True,
    oauth: AsyncOAuthFlow | None = None,
) -> web.Application:
    secret = signing_secret.encode() if signing_secret else None
    rejections = RejectionLog()

    async def slack_events(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            return await _dispatch(request)
        except Refused as refusal:
            metrics.events.labels(refusal.outcome).inc()
            if refusal.rejection is not None:
                rejections.rejected(refusal.rejection, remote=request.remote)
            return web.Response(status=refusal.status, text=refusal.reason)
        finally:
            metrics.ack_seconds.observe(time.perf_counter() - started)

    async def _dispatch(request: web.Request) -> web.Response:
        if secret is None:
            raw = await read_body(request)
        else:
            timestamp, signature = signing_headers(request.headers, now=time.time())
            raw = await read_body(request)
            if not signature_matches(secret, timestamp, raw, signature):
                raise Refused(401, "invalid signature", "unauthorized", "signature")
            rejections.verified()
        text = _event_text(raw, form=request.content_type == _FORM)
        bolt_request = AsyncBoltRequest(
            body=text, query=request.query_string, headers=dict(request.headers)
        )
        return await to_aiohttp_response(await bolt.async_dispatch(bolt_request))

    # The events route reads its body itself (`read_body`); the limit here guards any
    # other route that ever reads one.
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    if events:
        app.router.add_post("/slack/events", slack_events)
    add_health_routes(app, ready, _NOT_READY if events else _NOT_READY_SOCKET)
    if oauth is not None:
        add_install_routes(app, oauth)
    return app


def build_health_app(ready: Readiness) -> web.Application:
    """A worker's server (`--role worker`): `/healthz` and `/readyz` for an orchestrator's
    probes, and no events route: a request to `/slack/events` is 404."""
    app = web.Application(client_max_size=1024)
    add_health_routes(app, ready, _NOT_READY_WORKER)
    return app


def add_health_routes(app: web.Application, ready: Readiness, not_ready: str) -> None:
    """`/healthz`: the process answers; `/readyz`: `ready()` says so, else 503 `not_ready`."""

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        if await ready():
            return web.Response(text="ready")
        return web.Response(status=503, text=not_ready)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)


def add_install_routes(app: web.Application, flow: AsyncOAuthFlow) -> None:
    """Slack's install flow (bolt's), at bolt's paths: no body is read, only the query
    (`code`, `state`) and headers (the state cookie)."""

    def route(
        handle: Callable[[AsyncBoltRequest], Awaitable[BoltResponse]],
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def respond(request: web.Request) -> web.Response:
            bolt_request = AsyncBoltRequest(
                body="", query=request.query_string, headers=dict(request.headers)
            )
            return await to_aiohttp_response(await handle(bolt_request))

        return respond

    app.router.add_get(flow.install_path, route(flow.handle_installation))
    app.router.add_get(flow.redirect_uri_path, route(flow.handle_callback))


def build_metrics_app(metrics: Metrics) -> web.Application:
    """`/metrics` alone, in Prometheus' text format, for the metrics listener."""

    async def metrics_route(request: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics_route)
    return app


def signing_headers(headers: CIMultiDictProxy[str], *, now: float) -> tuple[str, str]:
    """The request's timestamp and signature, well-formed and fresh, or `Refused`."""
    timestamps = headers.getall(TIMESTAMP_HEADER, [])
    signatures = headers.getall(SIGNATURE_HEADER, [])
    if not timestamps or not signatures:
        reason = f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER}"
        raise Refused(401, reason, "unauthorized", "unsigned")
    if len(timestamps) > 1 or len(signatures) > 1:
        reason = f"{TIMESTAMP_HEADER} and {SIGNATURE_HEADER} must each be sent once"
        raise Refused(400, reason, "unauthorized", "unsigned")
    timestamp, signature = timestamps[0], signatures[0]
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Refused(400, f"{TIMESTAMP_HEADER} must be Unix seconds", "unauthorized", "unsigned")
    if not _SIGNATURE.fullmatch(signature):
        reason = f"{SIGNATURE_HEADER} must be v0= and 64 hexadecimal digits"
        raise Refused(400, reason, "unauthorized", "unsigned")
    if abs(skew := int(timestamp) - now) > MAX_AGE_SECONDS:
        raise Refused(401, "stale timestamp", "unauthorized", "clock_skew", skew)
    return timestamp, signature


def signature_matches(secret: bytes, timestamp: str, body: bytes, signature: str) -> bool:
    """Slack's v0 signature over the raw body, compared in constant time."""
    base = b"v0:" + timestamp.encode("ascii") + b":" + body
    expected = "v0=" + hmac.new(secret, base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


async def read_body(request: web.Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body, read only up to `limit` bytes: a longer one is `Refused` (413) as soon as
    its declared length or its `limit + 1`-th byte says so, whatever follows unread."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise Refused(413, f"the body must be at most {limit} bytes", "rejected")
    body = bytearray()
    while len(body) <= limit:
        chunk = await request.content.read(limit + 1 - len(body))
        if not chunk:
            return bytes(body)
        body += chunk
    raise Refused(413, f"the body must be at most {limit} bytes", "rejected")


def _event_text(raw: bytes, *, form: bool = False) -> str:
    """The body as the text bolt takes, or `Refused` (400) when bolt cannot be given it;
    `form`: an interaction payload, form-encoded."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(400, "the body must be UTF-8 JSON", "rejected") from None
    problem = _interaction_problem(text) if form else _problem(text)
    if problem is not None:
        raise Refused(400, problem, "rejected")
    return text


def _interaction_problem(text: str) -> str | None:
    """Why bolt cannot be given this form body (an interaction or a slash command), or
    None when it can."""
    try:
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=True, max_num_fields=32)
    except ValueError:
        return "the body must be form-encoded with one payload field"
    if "payload" not in fields and "command" in fields:
        return _command_problem(fields)
    payloads = fields.get("payload", [])
    if len(payloads) != 1:
        return "the body must be form-encoded with one payload field"
    problem = _problem(payloads[0])
    if problem is not None:
        return f"payload: {problem}"
    try:
        check_interaction(json.loads(payloads[0]))
    except MalformedEvent as exc:
        return f"malformed interaction: {exc}"
    return None


def _command_problem(fields: Mapping[str, list[str]]) -> str | None:
    """Why this slash command's fields cannot be read, or None: each field once."""
    if any(len(values) != 1 for values in fields.values()):
        return "a slash command sends each field once"
    try:
        slash_command({name: values[0] for name, values in fields.items()})
    except MalformedEvent as exc:
        return str(exc)
    return None


def _problem(text: str) -> str | None:
    """Why bolt cannot be given this body, or None when it can."""
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: "[[[[…", nested past Python's stack
        return "the body must be JSON"
    if not isinstance(body, Mapping):
        return "the body must be a JSON object"
    try:
        check_shape(body)
    except MalformedEvent as exc:
        return f"malformed event: {exc}"
    return None


async def listen(stack: AsyncExitStack, app: web.Application, host: str, port: int) -> int:
    """Serve `app` on host:port until `stack` closes; the port it got."""
    runner = web.AppRunner(app, access_log=None, logger=SERVER_LOG)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    await web.TCPSite(runner, host, port).start()
    return int(runner.addresses[0][1])
