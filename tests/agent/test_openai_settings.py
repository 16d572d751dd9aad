"""open_model and ProviderSettings: models from configuration, secrets kept out of sight."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from agent.core.errors import ConfigError
from agent.models.providers import ProviderSettings, open_model
from agent.models.providers.anthropic import AnthropicModel
from agent.models.providers.openai import OpenAIModel

SECRET = "sk-0123456789secret"
SETTINGS = ProviderSettings(
    openai_api_key=SecretStr(SECRET),
    anthropic_api_key=SecretStr(SECRET),
    gateway_token=SecretStr(f"Bearer {SECRET}"),
)


async def test_specs_open_the_right_model_in_the_right_slot() -> None:
    """`provider:model` picks the wire format; the slot and streaming flag are kept."""
    openai = open_model("openai:gpt-4.1-mini", slot=0, settings=SETTINGS)
    anthropic = open_model("anthropic:claude-sonnet-4-5", slot=1, settings=SETTINGS)
    assert isinstance(openai, OpenAIModel) and openai.name == "openai:gpt-4.1-mini"
    assert isinstance(anthropic, AnthropicModel) and anthropic.route.slot == 1
    assert openai.streaming
    for model in (openai, anthropic):
        assert SECRET not in repr(model)
        await model.aclose()


async def test_model_names_may_contain_colons() -> None:
    """An Ollama tag such as `llama3:8b` stays part of the model name."""
    settings = ProviderSettings(openai_base_url="http://127.0.0.1:11434/v1")
    model = open_model("openai:llama3:8b", slot=0, settings=settings)
    assert isinstance(model, OpenAIModel) and model.model == "llama3:8b"
    await model.aclose()


@pytest.mark.parametrize("spec", ["gpt-4.1-mini", "openai:", ":gpt", ""])
def test_malformed_spec_names_the_variable(spec: str) -> None:
    """A spec without provider and model is a ConfigError naming the variable given."""
    with pytest.raises(
        ConfigError, match="THREADGATE_FALLBACK_MODEL must look like provider:model"
    ):
        open_model(spec, slot=1, settings=SETTINGS)


def test_unknown_provider_names_the_variable() -> None:
    """An unknown provider is a ConfigError naming THREADGATE_MODEL for slot 0."""
    with pytest.raises(ConfigError, match="THREADGATE_MODEL names an unknown provider 'gemini'"):
        open_model("gemini:pro", slot=0, settings=SETTINGS)


@pytest.mark.parametrize(
    ("spec", "variable"),
    [("openai:gpt", "OPENAI_API_KEY"), ("anthropic:claude", "ANTHROPIC_API_KEY")],
)
def test_missing_key_for_the_vendor_api_is_a_config_error(spec: str, variable: str) -> None:
    """Against the vendor's own API a missing key names the key variable."""
    with pytest.raises(ConfigError, match=f"{variable} is not set"):
        open_model(spec, slot=0, settings=ProviderSettings())


async def test_missing_key_is_fine_for_a_local_server() -> None:
    """A local OpenAI-compatible server (vLLM, Ollama) needs no key."""
    model = open_model(
        "openai:qwen", slot=0, settings=ProviderSettings(openai_base_url="http://localhost:8000/v1")
    )
    await model.aclose()


def test_settings_repr_hides_secrets() -> None:
    """The settings' repr masks every secret."""
    assert SECRET not in repr(SETTINGS) and SECRET not in str(SETTINGS)
