"""The provider object: one `httpx.AsyncClient` and the credentials that go with it.

The client's transport is the caller's (`ProviderSettings.transport`), httpx's own when
none is given: the gateway passes one over aiohttp (`gateway/models/transport.py`; httpx's
own was a large share of the gateway's CPU), and httpx stays the API the wire formats and `classify` are
written to. `aclose` closes the client, and with it the transport.

A wire-format module (`openai`, `anthropic`) maps requests and responses; the provider
owns the connection pool and authentication, so several models on one vendor can share it
and secrets live in exactly one object. Secrets are `SecretStr` and are turned into header
values only when a request is sent; nothing here prints them.

The request body is encoded by orjson (`json_body`), not by httpx's `json=` (the
standard library's encoder): a round's body is tens of kilobytes (the system prompt, the
tools, the window), and encoding it was the largest single cost of building a request,
about 150 µs against orjson's tenth of that (bench/model_request.py, BENCHMARKS.md).
orjson is a well-kept, widely used encoder that writes what httpx wrote (compact, UTF-8,
the same key order, the same bytes but for how a float is spelled: `1e-5`, not `1e-05`);
whatever it refuses (a mapping that is no `dict`, an integer past 64 bits) is encoded by
the standard library as before.

An AI gateway in front of the vendor (Cloudflare AI Gateway, a LiteLLM proxy) gets its own
credential: when `gateway_token` is set it is sent in `gateway_header`, beside the vendor
key, exactly as configured — for Cloudflare configure the value as `Bearer <token>`. We do
not add a `Bearer ` prefix ourselves because gateways disagree on the scheme.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import httpx
import orjson
from pydantic import SecretStr

from agent.core.errors import Route
from agent.models.providers.classify import classify_exception, classify_status
from agent.models.providers.vendors import DEFAULT_MODEL_TIMEOUT

if TYPE_CHECKING:
    from agent.core.ports import Showing

# The httpx request extension that carries the `Showing` of the draft a streamed answer is
# shown in: `Provider.stream` sets it, the transport reads it (the gateway's).
SHOWING = "threadgate_showing"


class Provider(ABC):
    """Owns the HTTP client and the authentication for one vendor endpoint."""

    name: ClassVar[str]

    def __init__(
        self,
        *,
        base_url: str,
        api_key: SecretStr | None = None,
        gateway_header: str | None = None,
        gateway_token: SecretStr | None = None,
        timeout: float = DEFAULT_MODEL_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._gateway = (
            (gateway_header, gateway_token) if gateway_header and gateway_token else None
        )
        # httpx's timeout bounds each connect, read and write; `deadline` (the same number)
        # bounds the whole request, streams included, in `HTTPModel.request`: a stream that
        # sends keep-alive comments forever never trips a read timeout.
        self.deadline = timeout
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
        )

    @abstractmethod
    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The vendor's own authentication headers for `api_key`."""

    def headers(self) -> dict[str, str]:
        """Every header a request carries: vendor auth and the gateway credential, and the
        body's type (the body is JSON, `json_body`)."""
        headers = {"content-type": "application/json", **self.auth_headers(self._key())}
        if self._gateway is not None:
            header, token = self._gateway
            headers[header] = token.get_secret_value()
        return headers

    def _key(self) -> str:
        return self._api_key.get_secret_value() if self._api_key is not None else ""

    async def post(self, path: str, body: Mapping[str, Any], route: Route) -> httpx.Response:
        """POST JSON and return a 2xx response, or raise the classified error."""
        try:
            response = await self._client.post(
                path, content=json_body(body), headers=self.headers()
            )
        except httpx.HTTPError as exc:
            raise classify_exception(exc, route=route) from exc
        if not response.is_success:
            raise classify_status(
                response.status_code,
                response.headers,
                response.content,
                route=route,
                gateway_token=self._gateway is not None,
            )
        return response

    @asynccontextmanager
    async def stream(
        self,
        path: str,
        body: Mapping[str, Any],
        route: Route,
        *,
        showing: Showing | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """POST JSON and yield a 2xx streaming response, or raise the classified error.
        `showing` goes with the request to the transport (`SHOWING`), which reads the
        stream less often once the draft it is shown in shows."""
        request = self._client.build_request(
            "POST",
            path,
            content=json_body(body),
            headers=self.headers(),
            extensions={SHOWING: showing} if showing is not None else None,
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise classify_exception(exc, route=route) from exc
        try:
            await _raise_for_status(response, route, gateway_token=self._gateway is not None)
            yield response
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        """Close the connection pool; safe to call twice."""
        await self._client.aclose()

    def __repr__(self) -> str:
        gateway = self._gateway[0] if self._gateway else None
        return f"{type(self).__name__}(base_url={self.base_url!r}, gateway_header={gateway!r})"


def json_body(body: Mapping[str, Any]) -> bytes:
    """`body` as the JSON bytes httpx's `json=` sent: by orjson, or by the standard library
    where orjson refuses a value (module docstring)."""
    try:
        return orjson.dumps(dict(body))
    except TypeError:
        encoded = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return encoded.encode()


async def _raise_for_status(response: httpx.Response, route: Route, *, gateway_token: bool) -> None:
    if response.is_success:
        return
    try:
        body = await response.aread()
    except httpx.HTTPError:
        body = b""
    status = response.status_code
    raise classify_status(status, response.headers, body, route=route, gateway_token=gateway_token)


class OpenAIProvider(Provider):
    """OpenAI-compatible endpoints: `Authorization: Bearer KEY`, omitted when there is no key."""

    name = "openai"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}


class AnthropicProvider(Provider):
    """The Anthropic Messages API: `x-api-key` and a pinned `anthropic-version`."""

    name = "anthropic"
    version = "2023-06-01"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        headers = {"anthropic-version": self.version}
        if api_key:
            headers["x-api-key"] = api_key
        return headers
