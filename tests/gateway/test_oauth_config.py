"""Exactly one way to reach Slack: SLACK_BOT_TOKEN (one workspace) or the app's client id
and secret (many, through OAuth); anything else is one sentence naming the variables."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from agent import ConfigError
from gateway.config.settings import load_settings
from tests.gateway.process import run_cli
from tests.gateway.rig import CLIENT_ID, CLIENT_SECRET

OAUTH = {
    "SLACK_CLIENT_ID": CLIENT_ID,
    "SLACK_CLIENT_SECRET": CLIENT_SECRET,
    "SLACK_SIGNING_SECRET": "s3cr3t-value",
    "THREADGATE_MODEL": "openai:gpt-test",
    "OPENAI_API_KEY": "sk-test",
}


def settings(env: dict[str, str]) -> None:
    load_settings(env_file=None, **{k.lower(): v for k, v in env.items()}).require_serve()


def test_oauth_settings_are_enough_to_serve() -> None:
    """The client id and secret, with no bot token, pass the checks `serve` makes."""
    settings(OAUTH)


def test_both_modes_at_once_are_refused_naming_both() -> None:
    """A bot token beside the client credentials: one sentence naming the variables."""
    with pytest.raises(ConfigError) as refused:
        settings({**OAUTH, "SLACK_BOT_TOKEN": "xoxb-1"})
    message = str(refused.value)
    assert "SLACK_BOT_TOKEN" in message and "SLACK_CLIENT_ID" in message
    assert "xoxb-1" not in message and message.count(".") == 1


@pytest.mark.parametrize("variable", ["SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET"])
def test_half_the_credentials_names_the_missing_one(variable: str) -> None:
    """The client id without the secret (or the other way round) names what is missing."""
    with pytest.raises(ConfigError, match=f"^{variable} is not set"):
        settings({k: v for k, v in OAUTH.items() if k != variable})


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SLACK_CLIENT_ID", "xoxb-pasted-here"), ("SLACK_CLIENT_SECRET", "not-a-secret-shape")],
)
def test_a_malformed_credential_is_named_not_echoed(variable: str, value: str) -> None:
    """A value that cannot be a client id or secret is named, without repeating it."""
    with pytest.raises(ConfigError, match=f"^{variable} does not look like one") as refused:
        settings({**OAUTH, variable: value})
    assert value not in str(refused.value)


def test_a_redirect_url_must_be_a_url() -> None:
    """THREADGATE_OAUTH_REDIRECT_URL that is not an http(s) URL is named."""
    with pytest.raises(ConfigError, match="THREADGATE_OAUTH_REDIRECT_URL"):
        settings({**OAUTH, "THREADGATE_OAUTH_REDIRECT_URL": "slack/oauth_redirect"})


async def test_serve_with_both_modes_exits_with_one_line(tmp_path: Path) -> None:
    """`threadgate serve` with a bot token and client credentials exits 2, one line."""
    env = {**OAUTH, "SLACK_BOT_TOKEN": "xoxb-1", "DATABASE_URL": "postgresql://127.0.0.1:1/none"}
    status, stderr = await run_cli(["serve"], env, tmp_path)
    assert status == 2 and stderr.count("\n") == 1 and "SLACK_CLIENT_ID" in stderr


def test_the_basic_auth_form_of_the_credentials_is_a_secret_to_redact() -> None:
    """The client secret, and the basic-auth header value it is sent in, are redacted."""
    values = load_settings(
        env_file=None, slack_client_id=CLIENT_ID, slack_client_secret=CLIENT_SECRET
    ).secret_values()
    assert CLIENT_SECRET in values
    assert base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode() in values


def test_a_malformed_token_key_is_named_not_echoed() -> None:
    """THREADGATE_TOKEN_KEY that is not a Fernet key: one sentence naming it."""
    with pytest.raises(ConfigError, match=r"^THREADGATE_TOKEN_KEY is invalid") as refused:
        load_settings(env_file=None, threadgate_token_key="too-short-to-be-a-key")
    assert "too-short-to-be-a-key" not in str(refused.value)
