"""Log lines carry the work's fields, in text and JSON, and never a secret."""

from __future__ import annotations

import json
import logging

from agent.core.log_context import bind_log_fields
from gateway.logs import FieldsFilter, JSONFormatter, TextFormatter


def record(message: str) -> logging.LogRecord:
    entry = logging.LogRecord("threadgate.test", logging.WARNING, __file__, 1, message, (), None)
    FieldsFilter().filter(entry)
    return entry


def test_bound_fields_appear_on_text_lines_until_the_block_ends() -> None:
    """Inside `bind_log_fields` every line says which task and thread it belongs to."""
    with bind_log_fields(task="T1:C1:1.0", channel="C1", thread_ts=None):
        inside = TextFormatter("%(message)s").format(record("working"))
    outside = TextFormatter("%(message)s").format(record("idle"))
    assert inside == "working task=T1:C1:1.0 channel=C1" and outside == "idle"


def test_json_lines_are_objects_with_the_fields() -> None:
    """THREADGATE_LOG_FORMAT=json gives one JSON object per line with the fields as keys."""
    with bind_log_fields(task="T1:C1:2.0", team="T1"), bind_log_fields(subtask="T1:C1:2.0:0:1"):
        line = JSONFormatter().format(record("sub"))
    entry = json.loads(line)
    assert (entry["message"], entry["task"], entry["team"], entry["subtask"]) == (
        "sub",
        "T1:C1:2.0",
        "T1",
        "T1:C1:2.0:0:1",
    )
