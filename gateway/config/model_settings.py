"""The models' settings: the fallback chain, the vendors' keys and URLs, sampling, retries, prices.

One group of `Settings` (gateway/config/settings.py), validated here; the routes it
describes are built by gateway/models/.
"""

from __future__ import annotations

import os
from typing import Annotated

from pydantic import Field, SecretStr, field_validator

from agent import (
    DEFAULT_GATEWAY_HEADER,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_MODEL_TIMEOUT,
    DEFAULT_PRICE_TABLE,
    VENDORS,
    ConfigError,
    PriceTable,
    RetryPolicy,
    RouteConfig,
    Sampling,
    installed_providers,
    parse_prices,
    parse_spec,
)
from gateway.config.groups import Group, inline_or_file
from gateway.config.route_config import VARIABLE as ROUTES_VARIABLE
from gateway.config.route_config import parse_routes, parse_stop_sequences, routes_json
from gateway.slack.client import carries_tokens_safely

OPENAI_BASE_URL = VENDORS["openai"].base_url
ANTHROPIC_BASE_URL = VENDORS["anthropic"].base_url


class ModelSettings(Group):
    """The models a worker calls, in fallback order, and how it calls them."""

    model: str | None = Field(default=None, validation_alias="THREADGATE_MODEL")
    fallback_model: str | None = Field(default=None, validation_alias="THREADGATE_FALLBACK_MODEL")
    # The fallback chain as a list of routes, each its own provider, model, base URL and
    # key (gateway/config/route_config.py); THREADGATE_MODEL and _FALLBACK_MODEL are the
    # two-route shorthand. Inline JSON, or a file holding it.
    chain: str = Field(default="", validation_alias="THREADGATE_ROUTES")
    openai_api_key: SecretStr | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    openai_base_url: str = Field(default=OPENAI_BASE_URL, validation_alias="OPENAI_BASE_URL")
    anthropic_api_key: SecretStr | None = Field(default=None, validation_alias="ANTHROPIC_API_KEY")
    anthropic_base_url: str = Field(
        default=ANTHROPIC_BASE_URL, validation_alias="ANTHROPIC_BASE_URL"
    )
    gateway_token: SecretStr | None = Field(
        default=None, validation_alias="THREADGATE_GATEWAY_TOKEN"
    )
    gateway_header: str = Field(
        default=DEFAULT_GATEWAY_HEADER, validation_alias="THREADGATE_GATEWAY_HEADER"
    )
    # Sampling for every request that sets none (a route's own win; a model that takes
    # none is not sent them). Unset: the provider's defaults.
    temperature: Annotated[float, Field(ge=0, le=2)] | None = Field(
        default=None, validation_alias="THREADGATE_TEMPERATURE"
    )
    top_p: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None, validation_alias="THREADGATE_TOP_P"
    )
    stop_sequences: str = Field(default="", validation_alias="THREADGATE_STOP_SEQUENCES")
    # Send the provider an opaque id of the person asked for (OpenAI `user`, Anthropic
    # `metadata.user_id`): a hash, never the Slack id (gateway/models/routes.py says why).
    send_user_id: bool = Field(default=False, validation_alias="THREADGATE_SEND_USER_ID")
    timeout_seconds: float = Field(
        default=DEFAULT_MODEL_TIMEOUT,
        gt=0,
        le=3600,
        validation_alias="THREADGATE_MODEL_TIMEOUT_SECONDS",
    )
    attempts: int = Field(
        default=RetryPolicy().attempts_per_slot,
        ge=1,
        le=10,
        validation_alias="THREADGATE_MODEL_ATTEMPTS",
    )
    # The wait before a slot's first retry after a transient failure (doubling, jittered).
    retry_seconds: float = Field(
        default=RetryPolicy().base_delay,
        ge=0,
        le=60,
        validation_alias="THREADGATE_MODEL_RETRY_SECONDS",
    )
    max_output_tokens: int = Field(
        default=DEFAULT_MAX_OUTPUT_TOKENS,
        ge=64,
        le=200_000,
        validation_alias="THREADGATE_MAX_OUTPUT_TOKENS",
    )
    # Prices per provider:model added to the built-in ones: inline JSON, or a file holding it.
    prices: str = Field(default="", validation_alias="THREADGATE_PRICES")
    # Requests name their conversation and mark their stable prefix for the providers'
    # prompt caches (agent/rounds/caching.py); off for a server that refuses the fields.
    prompt_caching: bool = Field(default=True, validation_alias="THREADGATE_PROMPT_CACHING")

    @field_validator("openai_base_url", "anthropic_base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        # The routes without a baseUrl of their own are reached here, with the vendor's key:
        # the rule of SLACK_API_URL and of a route's baseUrl (route_config.py).
        if not carries_tokens_safely(value):
            raise ValueError(
                "expected an https:// URL, or plain http to a loopback address such as "
                "http://127.0.0.1:11434/v1: the key and what people write are sent there"
            )
        return value

    @field_validator("stop_sequences")
    @classmethod
    def _stops(cls, value: str) -> str:
        parse_stop_sequences(value)  # a ValueError names what is wrong
        return value

    @field_validator("chain")
    @classmethod
    def _routes(cls, value: str) -> str:
        routes_json(value)  # the file must be readable; its content is read by `routes`
        return value

    @field_validator("prices")
    @classmethod
    def _prices(cls, value: str) -> str:
        prices_json(value)  # a ValueError names what is wrong
        return value

    @property
    def sampling(self) -> Sampling:
        """The deployment's sampling settings (THREADGATE_TEMPERATURE, _TOP_P, _STOP_SEQUENCES)."""
        return Sampling(self.temperature, self.top_p, parse_stop_sequences(self.stop_sequences))

    def routes(self, *, keys: bool = True) -> tuple[RouteConfig, ...]:
        """The fallback chain: THREADGATE_ROUTES, or THREADGATE_MODEL then
        THREADGATE_FALLBACK_MODEL (none when neither is set). A route without a base URL
        is reached by its vendor's settings (OPENAI_BASE_URL and OPENAI_API_KEY, …).
        Keys named `${VAR}` are read from the process environment, here; without `keys`
        they are not (an ingress, which calls no model, may not have them)."""
        known = tuple(installed_providers())
        if self.chain.strip():
            if self.model or self.fallback_model:
                raise ConfigError(
                    f"{ROUTES_VARIABLE} and THREADGATE_MODEL/THREADGATE_FALLBACK_MODEL are both "
                    f"set: list every route in {ROUTES_VARIABLE}, or unset it."
                )
            text = routes_json(self.chain)
            return parse_routes(text, os.environ if keys else None, known=known)
        named = (
            ("THREADGATE_MODEL", self.model),
            ("THREADGATE_FALLBACK_MODEL", self.fallback_model),
        )
        return tuple(
            RouteConfig(*parse_spec(spec, variable=variable, known=known))
            for variable, spec in named
            if spec
        )

    def route_for(self, spec: str, *, variable: str) -> RouteConfig:
        """The route a channel's `provider:model` stands for: the deployment's route of that
        spec; else one to that model by the first route of its provider (its base URL and
        key); else by the vendor's settings."""
        provider, model = parse_spec(spec, variable=variable, known=tuple(installed_providers()))
        routes = self.routes()
        same = [r for r in routes if r.spec == f"{provider}:{model}"]
        if same:
            return same[0]
        kin = [r for r in routes if r.provider == provider]
        if kin:
            return RouteConfig(
                provider,
                model,
                kin[0].base_url,
                kin[0].api_key,
                kin[0].credential,
                sampling=kin[0].sampling,
            )
        return RouteConfig(provider, model)

    @property
    def specs(self) -> tuple[str, ...]:
        """The chain's `provider:model`s in order (THREADGATE_ROUTES', or THREADGATE_MODEL
        then THREADGATE_FALLBACK_MODEL, those that are set)."""
        if self.chain.strip():
            return tuple(route.spec for route in self.routes())
        return tuple(spec for spec in (self.model, self.fallback_model) if spec)

    def price_table(self) -> PriceTable:
        """The built-in prices with THREADGATE_PRICES's entries over them."""
        text = prices_json(self.prices)
        return DEFAULT_PRICE_TABLE.with_entries(parse_prices(text) if text else {})


def prices_json(value: str) -> str:
    """THREADGATE_PRICES's JSON: the value itself when it is an object, else the file it
    names; a `ValueError` (said of the setting) when either is wrong."""
    text = inline_or_file(value, opens="{")
    if text:
        parse_prices(text)
    return text
