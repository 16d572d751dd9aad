"""A route: one entry of the fallback chain — a provider, a model, where it is reached,
with which key, what it accepts and how it samples.

The chain is a list of routes (`THREADGATE_ROUTES`, read by gateway/config/settings.py;
`THREADGATE_MODEL` and `THREADGATE_FALLBACK_MODEL` are the two-route shorthand), each
with its own base URL and key, so two routes of one vendor may go to two accounts, or
one to the vendor and one to a gateway in front of it. The ladder tries them in order
(agent/models/ladder.py) and every answer is stored with the index of the route that
gave it (`Route.slot`).

`Sampling` is what the operator set for requests that do not say (`THREADGATE_TEMPERATURE`,
`THREADGATE_TOP_P`, `THREADGATE_STOP_SEQUENCES`, or a route's own): a request's own value
wins, and a model that takes no sampling parameters is not sent them
(agent/models/capabilities.py). Its `options` are the route's provider options
(`providerOptions`: reasoning effort, a thinking budget, whatever the vendor's API takes
that we do not model), merged into the request body by the wire format, under the
request's own `provider_options` key by key: the escape hatch for what a vendor adds
before we model it. The gateway refuses keys it sets itself (gateway/config/route_config.py). The key is a `SecretStr`, read from the environment by the
gateway and never printed; `credential` names the variable it came from, for messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import SecretStr

from agent.models.contract import ModelRequest


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling settings for requests that set none of their own."""

    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)  # the route's providerOptions

    def over(self, base: Sampling) -> Sampling:
        """These settings, with `base`'s where these have none."""
        return Sampling(
            self.temperature if self.temperature is not None else base.temperature,
            self.top_p if self.top_p is not None else base.top_p,
            self.stop or base.stop,
            {**base.options, **self.options},
        )

    def applied(self, request: ModelRequest) -> ModelRequest:
        """`request` with these settings where it set none."""
        return replace(
            request,
            temperature=request.temperature
            if request.temperature is not None
            else self.temperature,
            top_p=request.top_p if request.top_p is not None else self.top_p,
            stop=request.stop or self.stop,
            provider_options={**self.options, **request.provider_options}
            if self.options
            else request.provider_options,
        )


NO_SAMPLING = Sampling()


@dataclass(frozen=True, slots=True)
class RouteConfig:
    """One route as configured. `base_url` None: the provider's own API (and then the
    provider's usual key when `api_key` is None); `capabilities` overrides the defaults
    for the model (by `Capabilities` field name)."""

    provider: str
    model: str
    base_url: str | None = None
    api_key: SecretStr | None = None
    credential: str = ""  # the variable `api_key` was read from, for messages
    capabilities: Mapping[str, bool] = field(default_factory=dict)
    sampling: Sampling = NO_SAMPLING

    @property
    def provider_options(self) -> Mapping[str, Any]:
        """What the route adds to every request body (`providerOptions`)."""
        return self.sampling.options

    @property
    def spec(self) -> str:
        """`provider:model`, as THREADGATE_MODEL writes it."""
        return f"{self.provider}:{self.model}"

    def __repr__(self) -> str:  # no key, ever
        return f"RouteConfig({self.spec!r}, base_url={self.base_url!r})"
