"""Fields that every log line of a piece of work carries (task, team, channel, thread).

The agent binds what it knows — the task and its opaque address — and the gateway's log
formatter prints whatever is bound, so a line deep inside a provider or a tool still says
which conversation it belongs to. A `ContextVar` follows asyncio tasks: each worker sees
only its own fields.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType

_NONE: Mapping[str, str] = MappingProxyType({})
_FIELDS: ContextVar[Mapping[str, str]] = ContextVar("threadgate_log_fields", default=_NONE)


@contextmanager
def bind_log_fields(**fields: str | None) -> Iterator[None]:
    """Add `fields` (None values skipped) to every log line until the block ends."""
    merged = {**_FIELDS.get(), **{k: v for k, v in fields.items() if v is not None}}
    token = _FIELDS.set(merged)
    try:
        yield
    finally:
        _FIELDS.reset(token)


def log_fields() -> Mapping[str, str]:
    """The fields bound here."""
    return _FIELDS.get()
