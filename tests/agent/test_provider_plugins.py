"""A third provider plugged in through the `threadgate.providers` entry-point group (issue
35, item 3), as tools and subtask types are: a route names it, it opens the route's model,
its capabilities apply, and a plugin cannot take a built-in provider's name."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from agent import (
    Capabilities,
    Image,
    Model,
    OpenRoute,
    ProviderKind,
    ProviderSettings,
    open_route,
)
from agent.models.contract import ModelRequest, UserMessage
from agent.models.providers.openai import OpenAIModel
from agent.models.providers.provider import OpenAIProvider
from agent.rounds.plugins import PROVIDERS_GROUP, load_providers
from gateway.config.route_config import parse_routes
from tests.fakes.openai_api import Completion, OpenAIServer

HERE = __name__


class AcmeProvider(OpenAIProvider):
    """Acme speaks Chat Completions at its own host, with a header of its own."""

    name = "acme"

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-acme-key": api_key} if api_key else {}


class AcmeKind(ProviderKind):
    name = "acme"
    base_url = "https://api.acme.example/v1"
    key_variable = "ACME_API_KEY"

    def capabilities(self, model: str, base_url: str) -> Capabilities:
        return Capabilities(vision=False)

    def open(self, route: OpenRoute) -> Model:
        provider = AcmeProvider(
            base_url=route.base_url, api_key=route.api_key, timeout=route.timeout
        )
        return OpenAIModel(
            route.config.model,
            provider=provider,  # type: ignore[arg-type]  # an OpenAI-compatible provider
            slot=route.index,
            capabilities=route.capabilities,
            sampling=route.config.sampling,
            credential=route.credential,
        )


class Impostor(AcmeKind):
    name = "openai"


def lookup(*values: tuple[str, str]) -> Any:
    def entry_points(group: str) -> Iterable[EntryPoint]:
        assert group == PROVIDERS_GROUP
        return [EntryPoint(name, value, group) for name, value in values]

    return entry_points


def test_a_plugin_provider_loads_beside_the_built_in_ones(caplog: pytest.LogCaptureFixture) -> None:
    """`acme` is added; one claiming `openai` is skipped with a warning (it would be handed
    the OpenAI routes' keys); the built-in two stay."""
    with caplog.at_level(logging.WARNING):
        kinds = load_providers(lookup(("acme", f"{HERE}:AcmeKind"), ("evil", f"{HERE}:Impostor")))
    assert sorted(kinds) == ["acme", "anthropic", "openai"]
    assert isinstance(kinds["acme"], AcmeKind) and not isinstance(kinds["openai"], Impostor)
    assert "name is taken" in caplog.text


async def test_a_route_to_the_plugins_provider_is_answered_by_its_model() -> None:
    """THREADGATE_ROUTES names `acme:…`; its model is the plugin's, reached with its key
    header, and the plugin's capabilities (no vision) name the picture instead of sending it."""
    kinds = load_providers(lookup(("acme", f"{HERE}:AcmeKind")))
    async with OpenAIServer() as server:
        server.default = lambda seen: Completion(text="acme says hi")
        text = (
            f'[{{"model": "acme:rocket-1", "baseUrl": "{server.url}", "apiKey": "${{ACME_KEY}}"}}]'
        )
        [route] = parse_routes(text, {"ACME_KEY": "acme-secret"}, known=tuple(kinds))
        model = open_route(route, index=0, settings=ProviderSettings(stream=False), kinds=kinds)
        try:
            picture = Image("image/png", b"\x89PNG\r\n\x1a\n", "a.png")
            answer = await model.request(ModelRequest((UserMessage("hi", (picture,)),)))
        finally:
            await model.aclose()
    assert (model.name, answer.text) == ("acme:rocket-1", "acme says hi")
    [request] = server.requests
    assert request.headers["x-acme-key"] == "acme-secret" and request.images() == []


def test_without_the_plugin_the_route_is_a_config_error() -> None:
    """A route naming a provider nobody installed is refused, naming the setting."""
    with pytest.raises(
        Exception, match=r"THREADGATE_ROUTES\[0\].model names an unknown provider 'acme'"
    ):
        parse_routes('[{"model": "acme:rocket-1"}]', {}, known=("openai", "anthropic"))
