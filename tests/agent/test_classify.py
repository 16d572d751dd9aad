"""Error classification at the boundary: complete, and honest about who refused."""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from agent.core.errors import (
    CredentialRejected,
    ModelError,
    NonTransientModelError,
    QuotaExhausted,
    Route,
    TransientModelError,
)
from agent.models.contract import ModelRequest, UserMessage
from agent.models.providers.classify import (
    classify_exception,
    classify_status,
    parse_retry_after,
    read_vendor_error,
)
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from tests.fakes.openai_api import Hang, JSONReply, OpenAIServer, RawReply, error_reply

ROUTE = Route("openai", "gpt-test", 0)
KINDS = (TransientModelError, NonTransientModelError, CredentialRejected, QuotaExhausted)

CLOUDFLARE = {
    "success": False,
    "result": [],
    "messages": [],
    "error": [{"code": 2009, "message": "Unauthorized"}],
}
LITELLM = {
    "error": {
        "message": "Authentication Error, Invalid proxy server token passed. Received API Key = sk-...",
        "type": "auth_error",
        "param": "None",
        "code": "401",
    }
}
OPENAI = {
    "error": {
        "message": "Incorrect API key provided: sk-abc. You can find your API key at ...",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
ANTHROPIC = {
    "type": "error",
    "error": {"type": "authentication_error", "message": "invalid x-api-key"},
}
ANTHROPIC_PERMISSION = {"type": "error", "error": {"type": "permission_error", "message": "no"}}


def classify(
    status: int,
    body: object = b"",
    headers: dict[str, str] | None = None,
    *,
    gateway_token: bool = True,
) -> ModelError:
    """As a request carrying a gateway token (unless told otherwise) would be answered."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return classify_status(
        status, headers or {}, raw, route=ROUTE, gateway_token=gateway_token, now=lambda: 1e6
    )


STATUS_TABLE = [
    (400, NonTransientModelError),
    (401, CredentialRejected),
    (402, QuotaExhausted),
    (403, CredentialRejected),
    (404, NonTransientModelError),
    (405, NonTransientModelError),
    (408, TransientModelError),
    (409, TransientModelError),
    (413, NonTransientModelError),
    (422, NonTransientModelError),
    (429, TransientModelError),
    (300, NonTransientModelError),
    (500, TransientModelError),
    (502, TransientModelError),
    (503, TransientModelError),
    (504, TransientModelError),
    (529, TransientModelError),
]


@pytest.mark.parametrize(("status", "kind"), STATUS_TABLE)
def test_documented_statuses(status: int, kind: type[ModelError]) -> None:
    """Every documented status maps to its class, carrying the route and status."""
    error = classify(status)
    assert type(error) is kind
    assert (error.route, error.status_code) == (ROUTE, status)


def test_every_status_maps_to_exactly_one_class() -> None:
    """No status from 300 to 599 falls through: each gives exactly one of the four classes."""
    for status in range(300, 600):
        error = classify(status)
        assert sum(isinstance(error, kind) for kind in KINDS) == 1, status


def test_openai_insufficient_quota_is_quota_exhausted() -> None:
    """OpenAI's 429 insufficient_quota is an exhausted quota, not a rate limit."""
    body = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}}
    assert type(classify(429, body)) is QuotaExhausted
    body = {"error": {"message": "quota", "type": "x", "code": "insufficient_quota"}}
    assert type(classify(429, body)) is QuotaExhausted


def test_anthropic_overloaded_529_is_transient() -> None:
    """Anthropic's 529 overloaded_error is retried."""
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    error = classify(529, body)
    assert type(error) is TransientModelError and "overloaded_error" in str(error)


@pytest.mark.parametrize(
    ("body", "source"),
    [
        (CLOUDFLARE, "gateway"),
        (LITELLM, "gateway"),
        (OPENAI, "provider"),
        (ANTHROPIC, "provider"),
        (ANTHROPIC_PERMISSION, "provider"),
        (b"<html><body>401 Authorization Required</body></html>", "unknown"),
        (b"", "unknown"),
        ({"detail": "Unauthorized"}, "unknown"),
        ({"error": "unauthorized"}, "unknown"),
        ([1, 2], "unknown"),
    ],
)
@pytest.mark.parametrize("status", [401, 403])
def test_credential_source_from_the_body_shape(status: int, body: object, source: str) -> None:
    """Who refused is read from the body's shape; anything unrecognised is `unknown`."""
    error = classify(status, body)
    assert isinstance(error, CredentialRejected) and error.source == source


def test_messages_name_the_secret_to_check() -> None:
    """Each source's message names the variable an operator should check."""
    assert "THREADGATE_GATEWAY_TOKEN" in str(classify(401, CLOUDFLARE))
    assert "OPENAI_API_KEY" in str(classify(401, OPENAI))
    unknown = str(classify(401, b"<html>"))
    assert "OPENAI_API_KEY" in unknown and "THREADGATE_GATEWAY_TOKEN" in unknown


def test_messages_never_echo_the_body() -> None:
    """Body text (which may echo a key) never reaches the message; a code at most."""
    leaky = {
        "error": {"message": "sk-live-SECRET", "type": "sk-live-SECRET", "code": "sk-live-SECRET"}
    }
    for status in (400, 401, 429, 500):
        assert "SECRET" not in str(classify(status, leaky))
    assert "sk-" not in str(classify(401, LITELLM)) and "sk-" not in str(classify(401, OPENAI))


def _httpx_exception_classes() -> list[type[Exception]]:
    found = [obj for _, obj in inspect.getmembers(httpx, inspect.isclass)]
    return [cls for cls in found if issubclass(cls, Exception)]


def _instantiate(cls: type[Exception]) -> Exception:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    if issubclass(cls, httpx.HTTPStatusError):
        return cls("boom", request=request, response=httpx.Response(503, request=request))
    if issubclass(cls, httpx.RequestError):
        return cls("boom", request=request)
    try:
        return cls("boom")
    except TypeError:
        return cls()


TRANSIENT_EXCEPTIONS = {
    httpx.TimeoutException,
    httpx.ConnectTimeout,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.PoolTimeout,
    httpx.NetworkError,
    httpx.ConnectError,
    httpx.ReadError,
    httpx.WriteError,
    httpx.CloseError,
    httpx.RemoteProtocolError,
    httpx.ProtocolError,
    httpx.ProxyError,
    httpx.TransportError,
    httpx.HTTPStatusError,  # built with a 503 above
}


def test_every_httpx_exception_maps_to_exactly_one_class() -> None:
    """Walking httpx's exception classes, each maps to one class, transient exactly as listed."""
    classes = _httpx_exception_classes()
    assert httpx.ReadTimeout in classes and len(classes) > 20
    for cls in classes:
        error = classify_exception(_instantiate(cls), route=ROUTE)
        assert sum(isinstance(error, kind) for kind in KINDS) == 1, cls
        assert isinstance(error, TransientModelError) == (cls in TRANSIENT_EXCEPTIONS), cls
        assert error.route == ROUTE


def test_non_httpx_exceptions_are_non_transient() -> None:
    """Anything else raised at the boundary (bad JSON, say) is not worth retrying."""
    assert type(classify_exception(ValueError("x"), route=ROUTE)) is NonTransientModelError


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Mon, 12 Jan 1970 13:46:50 GMT"}, 10.0),
        ({"retry-after": "Mon, 12 Jan 1970 13:46:30 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "nan"}, None),
        ({}, None),
    ],
)
def test_retry_after_seconds_dates_and_millis(
    headers: dict[str, str], seconds: float | None
) -> None:
    """Retry-After is read as seconds or an HTTP date; retry-after-ms wins when present."""
    assert parse_retry_after(headers, now=lambda: 1_000_000.0) == seconds


def test_retry_after_travels_on_the_error() -> None:
    """A 429 with Retry-After carries the delay on the transient error."""
    error = classify(
        429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"retry-after": "3"}
    )
    assert isinstance(error, TransientModelError) and error.retry_after == 3.0


@given(st.dictionaries(st.sampled_from(["retry-after", "retry-after-ms"]), st.text(max_size=40)))
def test_retry_after_never_raises_on_untrusted_headers(headers: dict[str, str]) -> None:
    """Any header text parses to a non-negative number of seconds or None."""
    value = parse_retry_after(headers, now=lambda: 0.0)
    assert value is None or value >= 0


@given(st.binary(max_size=200))
def test_vendor_error_reader_never_raises(body: bytes) -> None:
    """Any response body yields a source, never an exception."""
    assert read_vendor_error(body).author in ("provider", "gateway", "unknown")


_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=10)
_keys = st.sampled_from(["error", "type", "code", "message", "success", "errors"])
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=12,
)


@given(_json)
def test_vendor_error_reader_never_raises_on_json(body: object) -> None:
    """Any JSON shape, however odd, yields a source without raising."""
    assert read_vendor_error(json.dumps(body).encode()).author in ("provider", "gateway", "unknown")


# Through a real client and server: the ambiguity cases an operator meets.


@pytest.fixture
async def model() -> AsyncIterator[tuple[OpenAIServer, OpenAIModel]]:
    """A model behind an AI gateway: its requests carry a gateway token."""
    async with OpenAIServer() as server:
        provider = OpenAIProvider(
            base_url=server.url,
            api_key=SecretStr("sk-test"),
            gateway_header="cf-aig-authorization",
            gateway_token=SecretStr("Bearer gw-test"),
        )
        model = OpenAIModel("gpt-test", provider=provider)
        yield server, model
        await model.aclose()


REQUEST = ModelRequest((UserMessage("hi"),))


@pytest.mark.parametrize(
    ("reply", "source"),
    [
        (JSONReply(CLOUDFLARE, status=401), "gateway"),
        (JSONReply(LITELLM, status=401), "gateway"),
        (error_reply(401, "Incorrect API key provided", code="invalid_api_key"), "provider"),
        (RawReply("<html>403 Forbidden</html>", status=403), "unknown"),
        (RawReply(b"", status=401), "unknown"),
    ],
)
async def test_credential_sources_over_http(
    model: tuple[OpenAIServer, OpenAIModel], reply: JSONReply | RawReply, source: str
) -> None:
    """Over a real socket, the refusing authority is told apart as in the table."""
    server, openai = model
    server.script(reply)
    with pytest.raises(CredentialRejected) as caught:
        await openai.request(REQUEST)
    assert caught.value.source == source and caught.value.route == openai.route


async def test_quota_and_rate_limit_over_http(model: tuple[OpenAIServer, OpenAIModel]) -> None:
    """Over a real socket, insufficient_quota and a plain 429 with Retry-After differ."""
    server, openai = model
    server.script(
        error_reply(
            429, "You exceeded your current quota", "insufficient_quota", "insufficient_quota"
        ),
        error_reply(429, "Rate limit", "requests", "rate_limit_exceeded", {"Retry-After": "2"}),
    )
    with pytest.raises(QuotaExhausted):
        await openai.request(REQUEST)
    with pytest.raises(TransientModelError) as caught:
        await openai.request(REQUEST)
    assert caught.value.retry_after == 2.0


async def test_connection_refused_is_transient() -> None:
    """Nothing listening on the port is a transient connection error."""
    async with OpenAIServer() as server:
        url = server.url
    provider = OpenAIProvider(base_url=url, api_key=SecretStr("sk-test"))
    openai = OpenAIModel("gpt-test", provider=provider)
    with pytest.raises(TransientModelError, match="ConnectError"):
        await openai.request(REQUEST)
    await openai.aclose()


async def test_read_timeout_is_transient() -> None:
    """A server that never answers times out into a transient error: httpx's read timeout
    or the request deadline, whichever fires first (they are the same number). On a loaded
    host the same 50 ms can run out while connecting: that is a timeout too."""
    async with OpenAIServer() as server:
        server.script(Hang())
        provider = OpenAIProvider(base_url=server.url, api_key=SecretStr("k"), timeout=0.05)
        openai = OpenAIModel("gpt-test", provider=provider)
        with pytest.raises(
            TransientModelError, match=r"ReadTimeout|ConnectTimeout|no complete answer within"
        ):
            await openai.request(REQUEST)
        await openai.aclose()
