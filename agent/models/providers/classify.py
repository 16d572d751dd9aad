"""Every way a model call can fail, mapped to exactly one class of `agent.core.errors`.

This is the boundary where httpx exceptions and HTTP statuses become our errors, so the
attempt ladder can decide by type alone (invariant 4 in docs/ARCHITECTURE.md):

    status / exception                          error                    source
    httpx.TimeoutException, NetworkError,       TransientModelError
      RemoteProtocolError, ProxyError
    408, 409, 429, 5xx (incl. Anthropic 529)    TransientModelError      (Retry-After honored)
    429 with code/type insufficient_quota       QuotaExhausted
    402, Anthropic billing_error                QuotaExhausted
    401, 403                                    CredentialRejected       provider/gateway/unknown
                                                                         (gateway: only when a
                                                                         gateway token was sent)
    400 about a picture or a document           AttachmentRefused        the model takes none of
                                                                         that kind, or refused
                                                                         one (where, if said)
    400, 404, 413, 422, any other status,       NonTransientModelError
      LocalProtocolError, UnsupportedProtocol,
      DecodingError, TooManyRedirects, InvalidURL,
      other httpx errors, malformed bodies
    a stream cut before the model finished,     StreamInterrupted        keeps the partial text
      a transient or unrecognised error event
      inside it (`StreamFailed`)
    any other error event inside a stream       as the HTTP status the error's type stands
                                                for (`invalid_request_error` is a 400 …)
    a 2xx stream not `text/event-stream`        NonTransientModelError

Which authority refused a credential is read from the body's *shape* only; an HTML page,
an empty body or JSON we do not recognise is `unknown` (an honest answer beats a guess that
sends an operator to rotate the wrong secret). A gateway's shape (Cloudflare AI Gateway's,
a LiteLLM proxy's) says `gateway` only when a gateway token (THREADGATE_GATEWAY_TOKEN) was
sent: a LiteLLM proxy checks the very key sent as the provider's (its "virtual key"), so
without a gateway token of our own its refusal does not tell which of our secrets to
rotate — `unknown`, whose message names both. Messages name the secret to check and at
most a vendor error code — never a response body, which could echo a key.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from agent.core.errors import (
    AttachmentKind,
    AttachmentRefused,
    CredentialRejected,
    CredentialSource,
    ModelError,
    NonTransientModelError,
    QuotaExhausted,
    Route,
    StreamInterrupted,
    TransientModelError,
)
from agent.models.providers.vendors import GATEWAY_TOKEN_VARIABLE, VENDORS, key_variable

_TRANSIENT_STATUSES = frozenset({408, 409, 429})
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_error"})
_PROVIDER_AUTH_TYPES = frozenset({"authentication_error", "permission_error"})
_OPENAI_AUTH_CODES = frozenset({"invalid_api_key", "invalid_organization", "invalid_project"})
_OPENAI_ERROR_TYPES = frozenset({"invalid_request_error", *_PROVIDER_AUTH_TYPES})
_CODE_SHAPE = re.compile(r"[a-z][a-z_]{0,47}")
# A media type of the usual shape (`type/subtype` in token characters, short): safe to quote.
_MEDIA_TYPE_SHAPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,39}/[a-z0-9][a-z0-9!#$&^_.+-]{0,39}")


@dataclass(frozen=True, slots=True)
class VendorError:
    """What a JSON error body says about itself: who wrote it and its code/type."""

    author: CredentialSource
    code: str | None = None

    def __post_init__(self) -> None:
        if self.code is not None and not self.code.startswith("cloudflare "):
            object.__setattr__(self, "code", _safe_code(self.code))


# The HTTP status each vendor error type is sent with when it is an HTTP answer (Anthropic's
# and OpenAI's documented types and codes), so the same error inside a stream is classified
# the same way. A type not listed here is treated as an interrupted stream.
_ERROR_TYPE_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "context_length_exceeded": 400,
    "billing_error": 402,
    "authentication_error": 401,
    "invalid_api_key": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "model_not_found": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "api_error": 500,
    "server_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class StreamFailed(Exception):
    """The server reported an error inside a stream (Anthropic's `error` event, an OpenAI
    error chunk). A wire format's stream reader raises it with the error's type and code
    names (most specific first) and, when the vendor put one in the error, its HTTP
    status; `stream_failure` is what it becomes. Carries no vendor message: `code` is the
    first name of a safe shape, or `error`."""

    def __init__(self, *names: str, status: int | None = None) -> None:
        safe = [name for name in names if _safe_code(name)]
        super().__init__(safe[0] if safe else "error")
        self.code = safe[0] if safe else "error"
        self.names = tuple(safe)
        self.status = status if status is not None and 400 <= status <= 599 else None

    def equivalent_status(self) -> int | None:
        """The HTTP status this error would have come with, if known."""
        if self.status is not None:
            return self.status
        return next((_ERROR_TYPE_STATUS[n] for n in self.names if n in _ERROR_TYPE_STATUS), None)


def classify_status(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    route: Route,
    gateway_token: bool = False,
    now: Callable[[], float] = time.time,
) -> ModelError:
    """The error for an HTTP response with a non-2xx `status` to a request that carried a
    gateway token or not (`gateway_token`)."""
    retry_after = parse_retry_after(headers, now=now)
    vendor = read_vendor_error(body)
    if vendor.author == "gateway" and not gateway_token:
        vendor = VendorError("unknown", vendor.code)  # no gateway token of ours to blame
    if status == 400 and (refused := read_attachment_refusal(body, route)) is not None:
        return refused
    return _classify(status, vendor, route, f"HTTP {status}", retry_after)


def stream_failure(route: Route, partial_text: str, failure: StreamFailed) -> ModelError:
    """The error for an error event inside a stream: what the same error would be as an
    HTTP answer, except that a transient one (or one we do not recognise) is an interrupted
    stream keeping the partial text."""
    status = failure.equivalent_status()
    if status is None:
        return cut_stream(route, partial_text, f"error event: {failure.code}")
    vendor = VendorError("provider", failure.code)
    error = _classify(status, vendor, route, "an error event in the stream")
    if isinstance(error, TransientModelError):
        return cut_stream(route, partial_text, f"error event: {failure.code}")
    return error


def _classify(
    status: int, vendor: VendorError, route: Route, answer: str, retry_after: float | None = None
) -> ModelError:
    """The error for a failure that came as `answer` (`HTTP 400`, or a stream's error event)
    with this `status`, or the status its error type stands for."""
    if status in (401, 403):
        return _credential_error(status, vendor, route, answer)
    if status == 402 or (vendor.code in _QUOTA_CODES):
        return _quota_error(status, vendor, route, answer)
    if status in _TRANSIENT_STATUSES or status >= 500:
        message = f"{route} is unavailable for now ({answer}{_code(vendor)})"
        return TransientModelError(
            message, route=route, status_code=status, retry_after=retry_after
        )
    message = f"{route} rejected the request ({answer}{_code(vendor)})"
    return NonTransientModelError(message, route=route, status_code=status)


def classify_exception(exc: Exception, *, route: Route) -> ModelError:
    """The error for an exception raised while talking to the model."""
    if isinstance(exc, httpx.HTTPStatusError):
        response = exc.response
        return classify_status(response.status_code, response.headers, b"", route=route)
    name = type(exc).__name__
    if isinstance(exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol):
        return NonTransientModelError(f"{route} could not be called ({name})", route=route)
    if isinstance(exc, httpx.TransportError):
        return TransientModelError(f"{route} could not be reached ({name})", route=route)
    return NonTransientModelError(f"{route} gave an unusable answer ({name})", route=route)


def cut_stream(route: Route, partial_text: str, reason: str) -> StreamInterrupted:
    """A stream that ended before the model finished: transient, keeping what arrived."""
    return StreamInterrupted(
        f"{route} stream ended early ({reason})", route=route, partial_text=partial_text
    )


def past_deadline(route: Route, seconds: float) -> TransientModelError:
    """No complete answer within the request's wall-clock deadline: transient, like any
    timeout (the next attempt, or the next slot, may be quicker)."""
    return TransientModelError(
        f"{route} gave no complete answer within {seconds:g} s (the request deadline)",
        route=route,
    )


def malformed(route: Route, what: str) -> NonTransientModelError:
    """A 2xx answer we cannot read."""
    return NonTransientModelError(f"{route} returned a malformed response ({what})", route=route)


def not_an_event_stream(route: Route, content_type: str | None) -> NonTransientModelError:
    """A 2xx answer to a streaming request that is not `text/event-stream` — a gateway's JSON
    error sent with status 200, a server that ignored `stream` — is malformed. Only a media
    type of the usual shape is quoted, never anything else from the response."""
    media = (content_type or "").partition(";")[0].strip().lower()
    if not media:
        shown = "no content type"
    elif _MEDIA_TYPE_SHAPE.fullmatch(media):
        shown = f"content type {media}"
    else:
        shown = "an unrecognised content type"
    return malformed(route, f"{shown}, not text/event-stream")


def _credential_error(
    status: int, vendor: VendorError, route: Route, answer: str
) -> CredentialRejected:
    known = VENDORS.get(route.provider)
    key_name = known.key_name if known else "the provider API key"
    key_var = route.credential or key_variable(route.provider)
    detail = f"{answer}{_code(vendor)}, {route}"
    messages = {
        "provider": f"{key_name} ({key_var}) was refused by the provider ({detail})",
        "gateway": (
            f"the AI gateway token ({GATEWAY_TOKEN_VARIABLE}) was refused by the gateway ({detail})"
        ),
        "unknown": (
            f"a credential was refused but the response does not say by whom ({detail}): "
            f"check {key_var} and, if an AI gateway is in front, {GATEWAY_TOKEN_VARIABLE}"
        ),
    }
    return CredentialRejected(
        messages[vendor.author], source=vendor.author, route=route, status_code=status
    )


def _quota_error(status: int, vendor: VendorError, route: Route, answer: str) -> QuotaExhausted:
    key_var = route.credential or key_variable(route.provider)
    message = (
        f"the account behind {key_var} is out of quota or credit "
        f"({answer}{_code(vendor)}, {route}): add credit or use another key"
    )
    return QuotaExhausted(message, route=route, status_code=status)


def _code(vendor: VendorError) -> str:
    return f", {vendor.code}" if vendor.code else ""


def _safe_code(code: str) -> str | None:
    """A vendor code fit for a message: a short snake_case word, so it cannot be a secret."""
    return code if _CODE_SHAPE.fullmatch(code) else None


def read_vendor_error(body: bytes) -> VendorError:
    """Recognise the error bodies of Cloudflare AI Gateway, LiteLLM, OpenAI and Anthropic."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return VendorError("unknown")
    if not isinstance(data, dict):
        return VendorError("unknown")
    for reader in (_cloudflare, _litellm, _anthropic, _openai):
        found = reader(data)
        if found is not None:
            return found
    return VendorError("unknown")


def _cloudflare(data: dict[str, Any]) -> VendorError | None:
    errors = data.get("error", data.get("errors"))
    if data.get("success") is not False or not isinstance(errors, list) or not errors:
        return None
    first = errors[0]
    if not isinstance(first, dict) or not isinstance(first.get("code"), int):
        return None
    return VendorError("gateway", f"cloudflare {first['code']}")


def _litellm(data: dict[str, Any]) -> VendorError | None:
    """A LiteLLM proxy's refusal: its `ProxyException` body, `{"error": {"message":
    "Authentication Error, …", "type": "auth_error", "param": …, "code": "401"}}`."""
    error = data.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(error, dict) or not isinstance(message, str):
        return None
    if error.get("type") != "auth_error" and "proxy server token" not in message.lower():
        return None
    return VendorError("gateway", "litellm auth_error")


def _anthropic(data: dict[str, Any]) -> VendorError | None:
    error = data.get("error")
    if data.get("type") != "error" or not isinstance(error, dict):
        return None
    kind = error.get("type")
    return VendorError("provider", kind) if isinstance(kind, str) else None


def _openai(data: dict[str, Any]) -> VendorError | None:
    error = data.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    code, kind = error.get("code"), error.get("type")
    if isinstance(code, str) and (code in _OPENAI_AUTH_CODES or code in _QUOTA_CODES):
        return VendorError("provider", code)
    if isinstance(kind, str) and (kind in _OPENAI_ERROR_TYPES or kind in _QUOTA_CODES):
        return VendorError("provider", code if isinstance(code, str) else kind)
    return None


def parse_retry_after(
    headers: Mapping[str, str], *, now: Callable[[], float] = time.time
) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` (seconds or an HTTP date)."""
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    return seconds if seconds is not None else _seconds_until(value, now())


def _number(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else None
    except ValueError:
        return None
    if number is None or number != number or number in (float("inf"), float("-inf")):
        return None
    return max(number, 0.0)


def _seconds_until(date: str, now: float) -> float | None:
    try:
        when = parsedate_to_datetime(date)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    return max(when.timestamp() - now, 0.0)


# What the vendors say when a model takes no pictures (OpenAI's "Invalid content type.
# image_url is only supported by certain models.", vLLM's "… is not a multimodal model")
# or no file parts, and when they refuse one picture or document (Anthropic's
# "messages.2.content.1.image.source.base64: image exceeds 5 MB maximum", "Could not
# process image", "The PDF specified was not valid"; OpenAI's "You uploaded an unsupported
# image", "The image data you provided does not represent a valid image").
_NO_PICTURES = re.compile(
    r"image_url is only supported|not a multimodal model|does not support (?:image|vision)|"
    r"image input is not supported|images are not supported",
    re.IGNORECASE,
)
_NO_FILES = re.compile(
    r"\bfile is only supported|does not support (?:pdf|file|document)|"
    r"(?:pdf|file|document)s? (?:input )?(?:is|are) not supported",
    re.IGNORECASE,
)
_PICTURE = re.compile(r"\bimages?\b", re.IGNORECASE)
_DOCUMENT = re.compile(r"\bpdf\b|\bdocument\b", re.IGNORECASE)
_TOO_LARGE = re.compile(r"\bexceeds?\b|too large|too big|too many pages", re.IGNORECASE)
_UNREADABLE = re.compile(
    r"unsupported|not (?:a )?valid|invalid|could not|does not appear", re.IGNORECASE
)
# Where in the body: Anthropic's message starts with the path, OpenAI's `param` is one.
_PATH = re.compile(r"messages\.\[?(\d+)\]?\.content\.\[?(\d+)\]?")


def read_attachment_refusal(body: bytes, route: Route) -> AttachmentRefused | None:
    """The `AttachmentRefused` a 400's body describes, or None when it is about something
    else. Only the facts are kept (kind, scope, where, a reason in our words): the
    vendor's text is not quoted, as for every other error."""
    text, param = _error_text(body)
    if text is None:
        return None
    kind = _refused_kind(text)
    if kind is None:
        return None
    scope = "model" if (_NO_PICTURES if kind == "picture" else _NO_FILES).search(text) else None
    too_large = _TOO_LARGE.search(text) and not _UNREADABLE.search(text)
    reason = "it is too large" if too_large else "it could not be read"
    found = _PATH.search(param or "") or _PATH.search(text)
    path = (int(found[1]), int(found[2])) if found else None
    if scope == "model":
        message = f"{route} takes no {kind}s (HTTP 400)"
        return AttachmentRefused(
            message, kind=kind, scope="model", reason="", route=route, status_code=400
        )
    message = f"{route} refused a {kind} of the request: {reason} (HTTP 400)"
    return AttachmentRefused(
        message,
        kind=kind,
        scope="attachment",
        reason=reason,
        path=path,
        route=route,
        status_code=400,
    )


def _refused_kind(text: str) -> AttachmentKind | None:
    if _NO_PICTURES.search(text) or _PICTURE.search(text):
        return "picture"
    if _NO_FILES.search(text) or _DOCUMENT.search(text):
        return "document"
    return None


def _error_text(body: bytes) -> tuple[str | None, str | None]:
    """An error body's message and `param` (OpenAI's), or None when it has no message."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None, None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None, None
    param = error.get("param")
    return error["message"], param if isinstance(param, str) else None
