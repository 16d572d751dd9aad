"""A loopback OpenTelemetry collector: OTLP over HTTP, traces only, for tests.

It takes `POST /v1/traces` with a protobuf `ExportTraceServiceRequest` (what the SDK's
OTLP/HTTP exporter sends; gzip-compressed when the exporter was told so) and keeps every
span it was sent, flattened, with its resource's `service.name`::

    async with OTLPCollector() as collector:      # collector.url: the OTLP endpoint
        ... OTEL_EXPORTER_OTLP_ENDPOINT=collector.url ...
        spans = await collector.wait_for(lambda spans: any(s.name == "round 0" for s in spans))
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the collector received it; ids in hex, `parent_id` "" for a root."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: Mapping[str, Any]
    service: str
    status_code: int


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one export request."""
    request = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        service = str(_attributes(resource_spans.resource.attributes).get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        span.name,
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                        span.kind,
                        _attributes(span.attributes),
                        service,
                        span.status.code,
                    )
                )
    return spans


class OTLPCollector:
    """The collector on 127.0.0.1 and a free port; `spans` holds what it received."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._runner: web.AppRunner | None = None
        self._arrived = asyncio.Condition()
        self.url = ""

    async def __aenter__(self) -> OTLPCollector:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        try:
            spans = decode(body)
        except Exception:  # a body that is not an ExportTraceServiceRequest
            return web.Response(status=400, text="not an ExportTraceServiceRequest")
        self.requests += 1
        async with self._arrived:
            self.spans.extend(spans)
            self._arrived.notify_all()
        reply = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")

    # The deadline turns a hang into a readable failure, like FakeSlack.wait_for_posts.
    async def wait_for(
        self,
        done: Callable[[list[ReceivedSpan]], bool],
        timeout: float = 30,  # noqa: ASYNC109
    ) -> list[ReceivedSpan]:
        """The spans once `done` holds for them (re-checked at every export), or an
        AssertionError after `timeout` seconds listing the span names received."""
        try:
            async with asyncio.timeout(timeout), self._arrived:
                await self._arrived.wait_for(lambda: done(self.spans))
        except TimeoutError:
            names = sorted({s.name for s in self.spans})
            raise AssertionError(f"the collector never got the spans; it got {names}") from None
        return list(self.spans)
