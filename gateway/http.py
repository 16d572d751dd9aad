"""The HTTP surface: `/slack/events`, `/healthz`, `/readyz`, `/metrics`.

The events route is an adapter and only translates, with one addition: it refuses what
bolt would choke on before bolt sees it. A request without a valid signature (or older
than five minutes) gets 401; a body that is not a JSON object gets 400. Bolt then checks
the signature again (cheap) and dispatches; what it answers is what Slack gets.

In Socket Mode (`events=False`) events arrive over the WebSocket instead, there is no
signing secret, and the server keeps only `/healthz`, `/readyz` and `/metrics`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier

from gateway.inbound import MalformedEvent, check_shape
from gateway.metrics import Metrics

Readiness = Callable[[], Awaitable[bool]]

# Slack's payloads are small; a large body is not an event worth reading.
MAX_BODY_BYTES = 1024 * 1024


def build_http_app(
    *,
    bolt: AsyncApp,
    signing_secret: str | None,
    ready: Readiness,
    metrics: Metrics,
    events: bool = True,
) -> web.Application:
    verifier = SignatureVerifier(signing_secret) if signing_secret else None

    async def slack_events(request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            return await _dispatch(request)
        finally:
            metrics.ack_seconds.observe(time.perf_counter() - started)

    async def _dispatch(request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _rejected(metrics, "the body must be UTF-8 JSON")
        if verifier is not None and not verifier.is_valid_request(text, dict(request.headers)):
            metrics.events.labels("unauthorized").inc()
            return web.Response(status=401, text="invalid signature or stale timestamp")
        problem = _problem(text)
        if problem is not None:
            return _rejected(metrics, problem)
        bolt_request = AsyncBoltRequest(
            body=text, query=request.query_string, headers=dict(request.headers)
        )
        return await to_aiohttp_response(await bolt.async_dispatch(bolt_request))

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        if await ready():
            return web.Response(text="ready")
        return web.Response(status=503, text="database unreachable or migrations pending")

    async def metrics_route(request: web.Request) -> web.Response:
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    if events:
        app.router.add_post("/slack/events", slack_events)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_route)
    return app


def _problem(text: str) -> str | None:
    """Why bolt cannot be given this body, or None when it can."""
    try:
        body = json.loads(text)
    except ValueError:
        return "the body must be JSON"
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    try:
        check_shape(body)
    except MalformedEvent as exc:
        return f"malformed event: {exc}"
    return None


def _rejected(metrics: Metrics, reason: str) -> web.Response:
    metrics.events.labels("rejected").inc()
    return web.Response(status=400, text=reason)
