"""Building models from configuration, without reading the environment.

The gateway reads the environment once and hands a `ProviderSettings` here;
`open_model("openai:gpt-4.1-mini", slot=0, settings=…)` returns a ready `Model`. A wrong
spec or a missing key raises `ConfigError` with one sentence naming the variable.

API keys: `OPENAI_API_KEY` (or `ANTHROPIC_API_KEY`) is required when the base URL is the
vendor's own API. Against any other base URL (a local vLLM or Ollama, a gateway holding
the key itself) the key is optional and, when absent, no vendor auth header is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr

from agent.core.errors import ConfigError
from agent.models.contract import Model
from agent.models.providers.anthropic import AnthropicModel, AnthropicProvider
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from agent.models.providers.provider import Provider
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

__all__ = [
    "DEFAULT_GATEWAY_HEADER",
    "DEFAULT_MODEL_TIMEOUT",
    "GATEWAY_HEADER_VARIABLE",
    "GATEWAY_TOKEN_VARIABLE",
    "VENDORS",
    "ProviderSettings",
    "Vendor",
    "open_model",
    "parse_spec",
]

P = TypeVar("P", bound=Provider)
_EXAMPLE = "e.g. openai:gpt-4.1-mini or anthropic:claude-sonnet-4-5"


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """Everything the providers need; secrets are `SecretStr` and never printed."""

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


def parse_spec(spec: str, *, variable: str = "THREADGATE_MODEL") -> tuple[str, str]:
    """Split `provider:model`; the model part may itself contain colons (`ollama` tags)."""
    provider, _, model = spec.strip().partition(":")
    if not provider or not model:
        raise ConfigError(f"{variable} must look like provider:model ({_EXAMPLE}), not {spec!r}.")
    if provider not in VENDORS:
        raise ConfigError(
            f"{variable} names an unknown provider {provider!r}: use openai or anthropic ({_EXAMPLE})."
        )
    return provider, model


def open_model(
    spec: str, *, slot: int, settings: ProviderSettings, variable: str | None = None
) -> Model:
    """The model for `spec` in `slot`; `variable` names the setting in errors."""
    variable = variable or ("THREADGATE_MODEL" if slot == 0 else "THREADGATE_FALLBACK_MODEL")
    provider, model = parse_spec(spec, variable=variable)
    if provider == "openai":
        return _openai(model, slot, settings)
    return _anthropic(model, slot, settings)


def _openai(model: str, slot: int, settings: ProviderSettings) -> OpenAIModel:
    url = settings.openai_base_url
    key = _key(settings.openai_api_key, url, OPENAI)
    provider = _provider(OpenAIProvider, url, key, settings)
    return OpenAIModel(model, provider=provider, slot=slot, stream=settings.stream)


def _anthropic(model: str, slot: int, settings: ProviderSettings) -> AnthropicModel:
    url = settings.anthropic_base_url
    key = _key(settings.anthropic_api_key, url, ANTHROPIC)
    provider = _provider(AnthropicProvider, url, key, settings)
    return AnthropicModel(model, provider=provider, slot=slot, stream=settings.stream)


def _provider(kind: type[P], url: str, key: SecretStr | None, settings: ProviderSettings) -> P:
    return kind(
        base_url=url,
        api_key=key,
        gateway_header=settings.gateway_header,
        gateway_token=settings.gateway_token,
        timeout=settings.timeout,
        transport=settings.transport(url) if settings.transport is not None else None,
    )


def _key(key: SecretStr | None, base_url: str, vendor: Vendor) -> SecretStr | None:
    if key is not None and key.get_secret_value():
        return key
    if urlsplit(base_url).hostname == vendor.host:
        raise ConfigError(
            f"{vendor.key_variable} is not set: put your API key for {vendor.host} there."
        )
    return None
