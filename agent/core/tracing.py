"""Traces: the port the agent records its work through, and the tracer that records nothing.

One message is one trace (gateway/telemetry/tracing.py is the OpenTelemetry side): the
gateway's admission span starts it, and its context — a W3C `traceparent` — is stored
with the task, so every later lease of the task (a round, a retry on another replica) and
each of its subtasks `resume`s that trace instead of starting one. The spans themselves
are display: a tracer never raises, and what it records never changes what the agent does.

Spans nest through the context of the running asyncio task (as log fields do,
agent/core/log_context.py), the way every OpenTelemetry instrumentation nests them: a
span started inside another is its child, also in tasks started inside it. The agent does
not import OpenTelemetry itself: with tracing off (no OTLP endpoint configured) the
process imports none of it and a span costs one empty context manager (`NO_TRACER`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Literal, Protocol, TypeAlias

AttributeValue: TypeAlias = str | int | float | bool | tuple[str, ...]
Attributes: TypeAlias = Mapping[str, AttributeValue]
SpanKind: TypeAlias = Literal["internal", "client", "server"]


class Span(Protocol):
    """One span being recorded."""

    def set(self, attributes: Attributes) -> None:
        """Add attributes (known only once the work is done, like an answer's tokens)."""


class Tracer(Protocol):
    """Records spans of the current trace."""

    def span(
        self, name: str, attributes: Attributes | None = None, *, kind: SpanKind = "internal"
    ) -> AbstractContextManager[Span]:
        """A span around the block, child of the current one; an exception leaving the
        block marks it failed (and still leaves the block)."""

    def resume(self, traceparent: str | None) -> AbstractContextManager[None]:
        """Spans started in the block continue the trace `traceparent` names, as children
        of its span; with None, the first span started in the block starts a trace."""

    def traceparent(self) -> str | None:
        """The current span as a W3C `traceparent`, to store; None when nothing is traced."""


class _NoSpan:
    __slots__ = ()

    def set(self, attributes: Attributes) -> None:
        pass


_NO_SPAN = _NoSpan()


class NoTracer:
    """The tracer with tracing off: nothing is recorded, nothing costs."""

    @contextmanager
    def span(
        self, name: str, attributes: Attributes | None = None, *, kind: SpanKind = "internal"
    ) -> Iterator[Span]:
        yield _NO_SPAN

    @contextmanager
    def resume(self, traceparent: str | None) -> Iterator[None]:
        yield

    def traceparent(self) -> str | None:
        return None


NO_TRACER: Tracer = NoTracer()
