"""THREADGATE_ROUTES and the sampling settings (issue 35, item 3): the fallback chain as a
list of routes, each its provider, model, base URL and key; keys named, never held; one
sentence naming the setting for every mistake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from agent import ConfigError, RouteConfig, Sampling
from gateway.config.channel_config import parse_channel_config
from gateway.config.route_config import GATEWAY_SECRETS, parse_routes
from gateway.config.settings import PLACES, VARIABLES, load_settings
from tests.gateway.process import run_cli

KNOWN = ("openai", "anthropic")
CHAIN = [
    {"model": "anthropic:claude-sonnet-4-5", "apiKey": "${CLAUDE_KEY}"},
    {
        "model": "openai:gpt-4.1-mini",
        "baseUrl": "https://gateway.example/openai/v1",
        "apiKey": "${GATEWAY_KEY}",
        "capabilities": {"documents": False, "parallelToolCalls": False},
        "temperature": 0.2,
        "topP": 0.5,
        "stop": ["\n\nUser:"],
        "providerOptions": {"reasoning_effort": "high", "extra_body": {"top_k": 4}},
    },
    {"model": "openai:llama3:8b", "baseUrl": "http://127.0.0.1:11434/v1"},
]
ENV = {"CLAUDE_KEY": "sk-ant-claude-secret", "GATEWAY_KEY": "gw-secret-0123"}


def test_each_route_is_read_with_its_own_url_key_capabilities_and_sampling() -> None:
    """Three routes, in order; keys read from the variables they name; a route without a
    key gets none."""
    routes = parse_routes(json.dumps(CHAIN), ENV, known=KNOWN)
    assert routes == (
        RouteConfig(
            "anthropic", "claude-sonnet-4-5", None, SecretStr("sk-ant-claude-secret"), "CLAUDE_KEY"
        ),
        RouteConfig(
            "openai",
            "gpt-4.1-mini",
            "https://gateway.example/openai/v1",
            SecretStr("gw-secret-0123"),
            "GATEWAY_KEY",
            {"documents": False, "parallel_tool_calls": False},
            Sampling(
                0.2, 0.5, ("\n\nUser:",), {"reasoning_effort": "high", "extra_body": {"top_k": 4}}
            ),
        ),
        RouteConfig("openai", "llama3:8b", "http://127.0.0.1:11434/v1"),
    )
    assert [r.api_key.get_secret_value() if r.api_key else None for r in routes] == [
        "sk-ant-claude-secret",
        "gw-secret-0123",
        None,
    ]


@pytest.mark.parametrize(
    ("route", "env", "said"),
    [
        (
            {"model": "openai:gpt", "apiKey": "sk-literal-key-0123"},
            {},
            r"THREADGATE_ROUTES\[0\].apiKey must name the environment variable",
        ),
        (
            {"model": "openai:gpt", "apiKey": "${NOT_SET}"},
            {},
            r"THREADGATE_ROUTES\[0\].apiKey names NOT_SET, which is not set",
        ),
        (
            {"model": "openai:gpt", "baseURL": "https://x"},
            {},
            r"THREADGATE_ROUTES\[0\]: field baseURL",
        ),
        ({"model": "gpt-4"}, {}, r"THREADGATE_ROUTES\[0\].model must look like provider:model"),
        ({"model": "openai:gpt", "baseUrl": "ftp://x"}, {}, r"THREADGATE_ROUTES\[0\].baseUrl"),
        (
            {"model": "openai:gpt", "capabilities": {"eyes": True}},
            {},
            r"THREADGATE_ROUTES\[0\].capabilities has an unknown key 'eyes'",
        ),
        (
            {"model": "openai:gpt", "stop": ["a", "b", "c", "d", "e"]},
            {},
            r"THREADGATE_ROUTES\[0\]: field stop",
        ),
        (
            {"model": "openai:gpt", "baseUrl": "http://model.example/v1", "apiKey": "${K}"},
            {"K": "sk-literal-key-0123"},
            r"THREADGATE_ROUTES\[0\].baseUrl must be https://, or plain http:// to a loopback",
        ),
        (
            {"model": "openai:gpt", "baseUrl": "http://localhost:11434/v1"},
            {},
            r"THREADGATE_ROUTES\[0\].baseUrl must be https://",
        ),
        (
            {"model": "openai:gpt", "apiKey": "${SLACK_BOT_TOKEN}"},
            {"SLACK_BOT_TOKEN": "sk-literal-key-0123"},
            r"THREADGATE_ROUTES\[0\].apiKey names SLACK_BOT_TOKEN, a secret of the gateway",
        ),
        (
            {"model": "openai:gpt", "providerOptions": {"stream": False}},
            {},
            r"THREADGATE_ROUTES\[0\].providerOptions sets 'stream', which the gateway sets "
            r"itself: remove it and leave it to the gateway\.$",
        ),
        (
            {"model": "anthropic:claude", "providerOptions": {"max_tokens": 64000}},
            {},
            r"THREADGATE_ROUTES\[0\].providerOptions sets 'max_tokens'.*"
            r"set it with THREADGATE_MAX_OUTPUT_TOKENS\.$",
        ),
        (
            {"model": "anthropic:claude", "providerOptions": {"thinking": {"type": "enabled"}}},
            {},
            r"THREADGATE_ROUTES\[0\].providerOptions enables Anthropic's extended thinking",
        ),
        (
            {"model": "openai:gpt", "providerOptions": ["reasoning_effort"]},
            {},
            r"THREADGATE_ROUTES\[0\]: field providerOptions",
        ),
    ],
)
def test_a_wrong_route_is_one_sentence_naming_it(
    route: dict[str, object], env: dict[str, str], said: str
) -> None:
    """A literal key, a variable not set, a misspelt key, a bad spec, URL, capability or
    stop list, plain http beyond loopback, the bot token as a key: one sentence naming the
    route, never a key's value."""
    with pytest.raises(ConfigError, match=said) as caught:
        parse_routes(json.dumps([route]), env, known=KNOWN)
    assert "sk-literal-key-0123" not in str(caught.value)
    assert str(caught.value).count(". ") <= 1


@pytest.mark.parametrize("name", sorted(GATEWAY_SECRETS | {"SLACK_ANY_OTHER", "slack_bot_token"}))
def test_no_route_may_name_a_secret_of_the_gateway_as_its_key(name: str) -> None:
    """Slack's tokens and secrets, the database URL, the token key, the alert webhook and
    the libraries' secrets are refused as a key, set or not, keys read or not."""
    route = json.dumps([{"model": "openai:gpt", "apiKey": f"${{{name}}}"}])
    for environ in ({name: "the-secret-value"}, None):
        with pytest.raises(ConfigError, match=f"apiKey names {name}, a secret of the gateway"):
            parse_routes(route, environ, known=KNOWN)


def test_every_secret_setting_outside_the_model_path_is_a_gateway_secret() -> None:
    """A secret setting added later is refused as a route's key without another list to
    keep: every SecretStr variable but the model group's is in GATEWAY_SECRETS."""
    secret = {
        variable
        for variable, info in VARIABLES.items()
        if SecretStr in (info.annotation, *get_args(info.annotation))
    }
    models = {v for v in secret if PLACES[v].group == "models"}
    assert models == {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "THREADGATE_GATEWAY_TOKEN"}
    assert secret - models <= GATEWAY_SECRETS


@pytest.mark.parametrize("variable", ["OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"])
def test_the_vendors_base_urls_follow_the_same_rule(variable: str) -> None:
    """The routes without a baseUrl of their own are reached at the vendor's base URL, with
    its key: https, or plain http to a loopback address; anything else names the variable."""
    assert load_settings(**{variable.lower(): "http://127.0.0.1:11434/v1"})
    assert load_settings(**{variable.lower(): "https://llm.example/v1"})
    for url in ("http://vllm.internal:8000/v1", "http://localhost:8000/v1"):
        with pytest.raises(ConfigError, match=f"{variable} is invalid .*loopback"):
            load_settings(**{variable.lower(): url})


def test_the_routes_setting_or_the_shorthand_never_both() -> None:
    """THREADGATE_MODEL and _FALLBACK_MODEL are the two-route shorthand; with
    THREADGATE_ROUTES set as well, which chain is meant cannot be guessed."""
    both = load_settings(threadgate_routes=json.dumps(CHAIN[2:]), threadgate_model="openai:x")
    with pytest.raises(ConfigError, match="THREADGATE_ROUTES and THREADGATE_MODEL"):
        both.models.routes()
    shorthand = load_settings(
        threadgate_model="openai:gpt-4.1", threadgate_fallback_model="anthropic:claude-haiku-4-5"
    )
    assert shorthand.models.routes() == (
        RouteConfig("openai", "gpt-4.1"),
        RouteConfig("anthropic", "claude-haiku-4-5"),
    )
    assert shorthand.models.specs == ("openai:gpt-4.1", "anthropic:claude-haiku-4-5")


def test_the_routes_may_live_in_a_file_and_their_keys_are_never_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """THREADGATE_ROUTES as a path reads the file; the keys it names are among the values
    the log redacts, and the model specs follow the chain."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(CHAIN))
    settings = load_settings(threadgate_routes=str(path))
    assert settings.models.specs == (
        "anthropic:claude-sonnet-4-5",
        "openai:gpt-4.1-mini",
        "openai:llama3:8b",
    )
    assert {"sk-ant-claude-secret", "gw-secret-0123"} <= set(settings.secret_values())


def test_sampling_settings_are_checked_when_read() -> None:
    """THREADGATE_TEMPERATURE, _TOP_P and _STOP_SEQUENCES make the deployment's sampling;
    a stop list that is not a JSON list of at most four strings names the variable."""
    settings = load_settings(
        threadgate_temperature="0.3", threadgate_top_p="0.8", threadgate_stop_sequences='["END"]'
    )
    assert settings.models.sampling == Sampling(0.3, 0.8, ("END",))
    with pytest.raises(ConfigError, match="THREADGATE_STOP_SEQUENCES is invalid"):
        load_settings(threadgate_stop_sequences="END")
    with pytest.raises(ConfigError, match="THREADGATE_TEMPERATURE is invalid"):
        load_settings(threadgate_temperature="3")


async def test_serve_with_a_literal_key_in_the_routes_says_so_in_one_line(tmp_path: Path) -> None:
    """A real `threadgate serve` process: one line naming the route, exit 2, no key."""
    env = {
        "SLACK_BOT_TOKEN": "xoxb-1",
        "SLACK_SIGNING_SECRET": "s3cr3t-value",
        "THREADGATE_ROUTES": json.dumps([{"model": "openai:gpt", "apiKey": "sk-pasted-here"}]),
        "DATABASE_URL": "postgresql://127.0.0.1:1/none",
    }
    status, stderr = await run_cli(["serve"], env, tmp_path)
    assert status == 2 and stderr.count("\n") == 1
    assert "THREADGATE_ROUTES[0].apiKey" in stderr and "sk-pasted-here" not in stderr


async def test_serve_with_a_route_keyed_on_the_bot_token_stops_in_one_line(
    tmp_path: Path,
) -> None:
    """A real `threadgate serve` process whose route names SLACK_BOT_TOKEN as its key: one
    line naming the route and the variable, exit 2, the token nowhere."""
    token = "xoxb-2718281828-3141592653-liveBotTokenValue"
    env = {
        "SLACK_BOT_TOKEN": token,
        "SLACK_SIGNING_SECRET": "s3cr3t-value",
        "THREADGATE_ROUTES": json.dumps(
            [
                {
                    "model": "openai:gpt",
                    "baseUrl": "https://llm.example/v1",
                    "apiKey": "${SLACK_BOT_TOKEN}",
                }
            ]
        ),
        "DATABASE_URL": "postgresql://127.0.0.1:1/none",
    }
    status, stderr = await run_cli(["serve"], env, tmp_path)
    assert status == 2 and stderr.count("\n") == 1
    assert "THREADGATE_ROUTES[0].apiKey names SLACK_BOT_TOKEN" in stderr
    assert token not in stderr


@given(st.text(max_size=200))
def test_any_value_is_routes_or_one_config_error(text: str) -> None:
    """Whatever the setting holds, reading it gives routes or a ConfigError, and the error
    never repeats a key's value."""
    try:
        parse_routes(text, {"K": "the-key-value"}, known=KNOWN)
    except ConfigError as exc:
        assert "the-key-value" not in str(exc)


def test_a_channels_model_is_reached_by_the_deployments_routes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A channel naming a model the chain has gets that route (its capabilities too);
    another model of a provider the chain reaches gets that provider's first route's URL
    and key, and the model's own defaults. A channel naming only `model` keeps every
    fallback of the chain."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(threadgate_routes=json.dumps(CHAIN))
    variable = "THREADGATE_CHANNEL_CONFIG"
    same = settings.models.route_for("openai:gpt-4.1-mini", variable=variable)
    assert same.capabilities == {"documents": False, "parallel_tool_calls": False}
    kin = settings.models.route_for("openai:gpt-4.1", variable=variable)
    assert (kin.base_url, kin.credential, kin.capabilities) == (
        "https://gateway.example/openai/v1",
        "GATEWAY_KEY",
        {},
    )
    assert settings.models.route_for("anthropic:claude-haiku-4-5", variable=variable).api_key == (
        SecretStr("sk-ant-claude-secret")
    )
    config = parse_channel_config({"channels": {"C0SUPPORT": {"model": "openai:gpt-4.1"}}})
    assert config.effective("C0SUPPORT", settings.models.specs).models == (
        "openai:gpt-4.1",
        "openai:gpt-4.1-mini",
        "openai:llama3:8b",
    )
