"""Traces over OpenTelemetry, exported with OTLP over HTTP: one message, one trace.

`agent.Tracer` is the port (agent/core/tracing.py says what a trace holds and how a task
resumes it); `OtelTracer` records it with the official SDK. This module is imported only
when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set
(gateway/process/resources.py): without them the process imports no OpenTelemetry at all.
The endpoint comes from the settings (gateway/config/settings.py reads the environment);
the SDK reads its other variables as it documents them — `OTEL_EXPORTER_OTLP_HEADERS`,
`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*` — so
an operator configures threadgate as any other instrumented service.

Spans are handed to a batch processor: exported from its own thread, every few seconds
or when a batch is full, never on the event loop; a collector that is down loses spans,
never a reply. Every span carries the task (and subtask) whose work it is
(`threadgate.task.id`, `threadgate.subtask.id`), read from the log fields the work binds
(agent/core/log_context.py), so a Slack call deep in a publisher is found by its task.

Tool calls are told to `ToolSpans` as `agent.ToolObserver` events (a start, then an end),
and it makes each call's span current while the tool runs, so what the tool does (a Slack
read, an MCP request) nests under it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agent import Attributes, Span, SpanKind, Task, ToolCallRecord, log_fields

_PROPAGATOR = TraceContextTextMapPropagator()
_KINDS = {
    "internal": trace.SpanKind.INTERNAL,
    "client": trace.SpanKind.CLIENT,
    "server": trace.SpanKind.SERVER,
}
# The log fields (bound by the work) every span is labelled with.
_LABELS = {"task": "threadgate.task.id", "subtask": "threadgate.subtask.id"}


class TaskLabels(SpanProcessor):
    """Labels each span, as it starts, with the task and subtask of the work it is in."""

    def on_start(self, span: SdkSpan, parent_context: otel_context.Context | None = None) -> None:
        fields = log_fields()
        for field, attribute in _LABELS.items():
            if field in fields:
                span.set_attribute(attribute, fields[field])

    def on_end(self, span: ReadableSpan) -> None:
        pass


class _OtelSpan:
    __slots__ = ("_span",)

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(dict(attributes))


class OtelTracer:
    """`agent.Tracer` on an OpenTelemetry `TracerProvider`."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("threadgate")

    @contextmanager
    def span(
        self, name: str, attributes: Attributes | None = None, *, kind: SpanKind = "internal"
    ) -> Iterator[Span]:
        with self._tracer.start_as_current_span(
            name, kind=_KINDS[kind], attributes=dict(attributes or {})
        ) as span:
            yield _OtelSpan(span)

    @contextmanager
    def resume(self, traceparent: str | None) -> Iterator[None]:
        carrier = {"traceparent": traceparent} if traceparent else {}
        # An empty context when there is nothing to resume: the next span is a trace's root.
        token = otel_context.attach(_PROPAGATOR.extract(carrier, otel_context.Context()))
        try:
            yield
        finally:
            otel_context.detach(token)

    def traceparent(self) -> str | None:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier.get("traceparent")

    def start(self, name: str, attributes: Attributes) -> tuple[trace.Span, object]:
        """A span made current until `finish` (for work told as a start and an end)."""
        span = self._tracer.start_span(
            name, kind=trace.SpanKind.INTERNAL, attributes=dict(attributes)
        )
        return span, otel_context.attach(trace.set_span_in_context(span))

    def finish(
        self, span: trace.Span, token: object, attributes: Attributes, *, failed: bool = False
    ) -> None:
        span.set_attributes(dict(attributes))
        if failed:
            span.set_status(trace.StatusCode.ERROR)
        otel_context.detach(token)  # type: ignore[arg-type]  # attach's own token
        span.end()

    def shutdown(self) -> None:
        """Export what is left and stop the exporter's thread."""
        self._provider.shutdown()


def otlp_tracer(endpoint: str, exporter: SpanExporter | None = None) -> OtelTracer:
    """The tracer exporting over OTLP/HTTP to `endpoint` (the traces URL; `exporter`, for a
    test that brings its own)."""
    resource = Resource.create({SERVICE_NAME: "threadgate"})  # OTEL_SERVICE_NAME wins
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(TaskLabels())
    provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter(endpoint)))
    return OtelTracer(provider)


class ToolSpans:
    """`agent.ToolObserver` that records each work-tool call as a span (GenAI's
    `execute_tool`), current while the tool runs."""

    def __init__(self, tracer: OtelTracer) -> None:
        self._tracer = tracer
        self._open: dict[tuple[str, str], tuple[trace.Span, Any]] = {}

    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        key = (task.id, record.call_id)
        if record.progress is not None:
            return  # the call's span is open already; progress is for people to watch
        if record.state == "running":
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": record.name,
                "gen_ai.tool.call.id": record.call_id,
            }
            self._open[key] = self._tracer.start(f"execute_tool {record.name}", attributes)
            return
        opened = self._open.pop(key, None)
        if opened is not None:
            outcome = {"threadgate.tool.outcome": record.state}
            self._tracer.finish(*opened, outcome, failed=record.state == "error")
