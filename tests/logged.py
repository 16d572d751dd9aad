"""Watching the logs from a test: what the code under test logged as an error meanwhile."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def errors_logged() -> Iterator[list[logging.LogRecord]]:
    """Records at ERROR or above, or carrying a traceback, logged by any logger meanwhile."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR or record.exc_info:
                records.append(record)

    handler = Collect(level=logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield records
    finally:
        root.removeHandler(handler)
