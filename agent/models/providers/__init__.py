"""Building models from configuration, without reading the environment.

The gateway reads the environment once and hands the routes (`RouteConfig`, one per
entry of the fallback chain) and a `ProviderSettings` here; `open_route(route, index=0,
settings=…)` returns a ready `Model`, opened by the route's `ProviderKind` (the built-in
two, or a plugin's: agent/models/providers/kinds.py). `open_model("openai:gpt-4.1-mini",
slot=0, settings=…)` is the same for a route given by its spec alone (the vendor's base
URL and key settings). A wrong spec or a missing key raises `ConfigError` with one
sentence naming the variable.

A route without a base URL is reached by its vendor's settings (`OPENAI_BASE_URL`,
`ANTHROPIC_BASE_URL`) and, without a key of its own, with the vendor's key
(`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`). A route with a base URL of its own never gets
the vendor's key: without one of its own (`apiKey` in THREADGATE_ROUTES), no vendor auth
header is sent. A key is required only where the base URL is the vendor's own API.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr

from agent.core.errors import ConfigError
from agent.models.capabilities import Capabilities
from agent.models.contract import Model
from agent.models.providers.kinds import BUILTIN_KINDS, OpenRoute, ProviderKind
from agent.models.providers.vendors import (
    ANTHROPIC,
    DEFAULT_GATEWAY_HEADER,
    DEFAULT_MODEL_TIMEOUT,
    GATEWAY_HEADER_VARIABLE,
    GATEWAY_TOKEN_VARIABLE,
    OPENAI,
    VENDORS,
    Vendor,
)
from agent.models.routes import NO_SAMPLING, RouteConfig, Sampling

__all__ = [
    "BUILTIN_KINDS",
    "DEFAULT_GATEWAY_HEADER",
    "DEFAULT_MODEL_TIMEOUT",
    "GATEWAY_HEADER_VARIABLE",
    "GATEWAY_TOKEN_VARIABLE",
    "VENDORS",
    "OpenRoute",
    "ProviderKind",
    "ProviderSettings",
    "Vendor",
    "open_model",
    "open_route",
    "parse_spec",
    "route_capabilities",
]

_EXAMPLE = "e.g. openai:gpt-4.1-mini or anthropic:claude-sonnet-4-5"


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """What every route shares, and the vendors' own settings (the routes given by a spec
    alone use them); secrets are `SecretStr` and never printed."""

    openai_api_key: SecretStr | None = None
    openai_base_url: str = OPENAI.base_url
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str = ANTHROPIC.base_url
    gateway_header: str = DEFAULT_GATEWAY_HEADER
    gateway_token: SecretStr | None = None
    timeout: float = DEFAULT_MODEL_TIMEOUT
    stream: bool = True
    # Makes each provider's HTTP transport from its base URL; None: httpx's own.
    transport: Callable[[str], httpx.AsyncBaseTransport] | None = None
    # The deployment's sampling settings, under each route's own.
    sampling: Sampling = NO_SAMPLING

    def vendor_route(self, provider: str, model: str) -> RouteConfig:
        """The route to `provider:model` that the vendor's own settings describe."""
        if provider == OPENAI.name:
            return RouteConfig(
                provider, model, self.openai_base_url, self.openai_api_key, OPENAI.key_variable
            )
        if provider == ANTHROPIC.name:
            return RouteConfig(
                provider,
                model,
                self.anthropic_base_url,
                self.anthropic_api_key,
                ANTHROPIC.key_variable,
            )
        return RouteConfig(provider, model)


def parse_spec(
    spec: str, *, variable: str = "THREADGATE_MODEL", known: Collection[str] = tuple(VENDORS)
) -> tuple[str, str]:
    """Split `provider:model`; the model part may itself contain colons (`ollama` tags).
    `known` are the provider names a route may use (the built-in ones and plugins')."""
    provider, _, model = spec.strip().partition(":")
    if not provider or not model:
        raise ConfigError(f"{variable} must look like provider:model ({_EXAMPLE}), not {spec!r}.")
    if provider not in known:
        names = " or ".join(sorted(known))
        raise ConfigError(
            f"{variable} names an unknown provider {provider!r}: use {names} ({_EXAMPLE})."
        )
    return provider, model


def open_model(
    spec: str, *, slot: int, settings: ProviderSettings, variable: str | None = None
) -> Model:
    """The model for `spec` as route `slot`, by the vendor's settings; `variable` names
    the setting in errors."""
    variable = variable or ("THREADGATE_MODEL" if slot == 0 else "THREADGATE_FALLBACK_MODEL")
    provider, model = parse_spec(spec, variable=variable)
    return open_route(
        RouteConfig(provider, model), index=slot, settings=settings, variable=variable
    )


def open_route(
    route: RouteConfig,
    *,
    index: int,
    settings: ProviderSettings,
    kinds: Mapping[str, ProviderKind] = BUILTIN_KINDS,
    variable: str = "THREADGATE_ROUTES",
) -> Model:
    """The model of `route`, the `index`-th of the chain; `variable` names the setting it
    came from in errors."""
    kind = kinds.get(route.provider)
    if kind is None:
        names = " or ".join(sorted(kinds))
        raise ConfigError(f"{variable} names an unknown provider {route.provider!r}: use {names}.")
    own_url = route.base_url is not None
    route = _by_vendor(route, settings, kind)
    base_url = route.base_url or kind.base_url
    key = route.api_key if route.api_key is not None and route.api_key.get_secret_value() else None
    if key is None and kind.key_variable and urlsplit(base_url).hostname == kind.host:
        if own_url or route.credential != kind.key_variable:
            raise ConfigError(
                f"{variable} sends {route.spec} to {kind.host} without a key: name the "
                "variable holding it in the route's apiKey."
            )
        raise ConfigError(
            f"{kind.key_variable} is not set: put your API key for {kind.host} there."
        )
    return kind.open(
        OpenRoute(
            replace(route, sampling=route.sampling.over(settings.sampling)),
            index,
            base_url,
            key,
            route.credential,
            kind.capabilities(route.model, base_url).overridden(route.capabilities),
            settings.timeout,
            settings.stream,
            settings.gateway_header,
            settings.gateway_token,
            settings.transport(base_url) if settings.transport is not None else None,
        )
    )


def _by_vendor(route: RouteConfig, settings: ProviderSettings, kind: ProviderKind) -> RouteConfig:
    """A route without a base URL, reached by its vendor's settings: their base URL, and
    their key when it has none of its own."""
    if route.base_url is not None:
        return route
    vendor = settings.vendor_route(route.provider, route.model)
    keyed = route.api_key is not None
    return replace(
        route,
        base_url=vendor.base_url or kind.base_url,
        api_key=route.api_key if keyed else vendor.api_key,
        credential=route.credential if keyed else vendor.credential or kind.key_variable,
    )


def route_capabilities(
    route: RouteConfig,
    *,
    settings: ProviderSettings,
    kinds: Mapping[str, ProviderKind] = BUILTIN_KINDS,
) -> Capabilities:
    """What the model of `route` accepts (its defaults where it is reached, with the
    route's overrides), without opening it; an unknown provider's: the plain defaults."""
    kind = kinds.get(route.provider)
    if kind is None:
        return Capabilities().overridden(route.capabilities)
    base_url = _by_vendor(route, settings, kind).base_url or kind.base_url
    return kind.capabilities(route.model, base_url).overridden(route.capabilities)
