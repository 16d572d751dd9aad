"""The kinds of provider a route can name: the built-in two and any a plugin adds.

A kind is what `provider` in `provider:model` stands for: its name, its own API's base URL
and the setting holding its usual key, the capabilities its models have by default, and
how to open one route's `Model` (`open`). OpenAI-compatible Chat Completions and the
Anthropic Messages API are built in; a distribution adds a third through the entry-point
group `threadgate.providers` (agent/rounds/plugins.py), naming a `ProviderKind` instance
or a factory of one::

    [project.entry-points."threadgate.providers"]
    acme = "acme_threadgate:AcmeProvider"

Its `open` gets an `OpenRoute` — everything the operator configured for the route,
resolved (base URL, key, capabilities, sampling, timeout, transport) — and returns a
`Model`; subclassing `HTTPModel` with a wire format of its own gets streaming, deadlines
and error classification for free.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr

from agent.models.capabilities import Capabilities, default_capabilities
from agent.models.contract import Model
from agent.models.providers.anthropic import AnthropicModel, AnthropicProvider
from agent.models.providers.http_model import HTTPModel
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from agent.models.providers.provider import Provider
from agent.models.providers.vendors import ANTHROPIC, OPENAI, Vendor
from agent.models.routes import RouteConfig


@dataclass(frozen=True, slots=True)
class OpenRoute:
    """One route, resolved: what a `ProviderKind` opens. `index` is its place in the chain."""

    config: RouteConfig
    index: int
    base_url: str
    api_key: SecretStr | None
    credential: str
    capabilities: Capabilities
    timeout: float
    stream: bool
    gateway_header: str
    gateway_token: SecretStr | None
    transport: httpx.AsyncBaseTransport | None = None

    def __repr__(self) -> str:  # no key, ever
        return f"OpenRoute({self.config.spec!r}, index={self.index}, base_url={self.base_url!r})"


class ProviderKind(ABC):
    """A provider a route may name (module docstring)."""

    name: str  # as in `provider:model`
    base_url: str  # its own API
    key_variable: str = ""  # the setting holding its usual key ("" when it has none)

    @property
    def host(self) -> str:
        """Its own API's host: a key is required only when a route talks to it."""
        return urlsplit(self.base_url).hostname or ""

    def capabilities(self, model: str, base_url: str) -> Capabilities:
        """What `model` accepts by default, reached at `base_url`."""
        return default_capabilities(
            self.name, model, own_api=urlsplit(base_url).hostname == self.host
        )

    @abstractmethod
    def open(self, route: OpenRoute) -> Model:
        """The route's model, ready for requests (closed with `Model.aclose`)."""


class VendorKind(ProviderKind):
    """A built-in vendor: its provider object and its wire format's model."""

    def __init__(self, vendor: Vendor, provider: type[Provider], model: type[HTTPModel]) -> None:
        self.name = vendor.name
        self.base_url = vendor.base_url
        self.key_variable = vendor.key_variable
        self._provider = provider
        self._model = model

    def open(self, route: OpenRoute) -> Model:
        provider = self._provider(
            base_url=route.base_url,
            api_key=route.api_key,
            gateway_header=route.gateway_header,
            gateway_token=route.gateway_token,
            timeout=route.timeout,
            transport=route.transport,
        )
        return self._model(
            route.config.model,
            provider=provider,
            slot=route.index,
            stream=route.stream,
            capabilities=route.capabilities,
            sampling=route.config.sampling,
            credential=route.credential,
        )


BUILTIN_KINDS: Mapping[str, ProviderKind] = {
    kind.name: kind
    for kind in (
        VendorKind(OPENAI, OpenAIProvider, OpenAIModel),
        VendorKind(ANTHROPIC, AnthropicProvider, AnthropicModel),
    )
}
