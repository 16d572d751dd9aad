"""The bot token goes to SLACK_API_URL with every call, so that URL is https — or plain
http to a loopback address, where only a test double on this host listens; any other is
refused in one sentence naming the variable (issue 37, item 8)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent import ConfigError
from gateway.config.settings import load_settings
from gateway.slack.client import carries_tokens_safely, slack_client
from tests.gateway.process import run_cli
from tests.gateway.rig import BOT_TOKEN, SECRET

ACCEPTED = [
    "https://slack.com/api/",
    "https://egress-proxy.internal:8443/slack/api",
    "http://127.0.0.1:9/api/",
    "http://127.5.6.7/api/",
    "http://[::1]:9/api/",
]
REFUSED = [
    "http://slack.com/api/",
    "http://localhost:9/api/",  # a name: it could resolve anywhere
    "http://127.0.0.1.evil.example/api/",
    "http://10.0.0.8/api/",
    "ftp://127.0.0.1/api/",
    "https:///api/",
    "slack.com/api/",
]


@pytest.mark.parametrize("url", ACCEPTED)
def test_https_and_loopback_http_are_accepted(url: str) -> None:
    """https anywhere, plain http to a loopback address (the tests' fakes)."""
    assert load_settings(env_file=None, slack_api_url=url).slack.api_url == url


@pytest.mark.parametrize("url", REFUSED)
def test_any_other_api_url_is_refused_naming_the_variable(url: str) -> None:
    """Plain http elsewhere, a name for loopback, another scheme, no host: one sentence
    that names SLACK_API_URL and what to put there."""
    with pytest.raises(ConfigError, match=r"^SLACK_API_URL is invalid \(.*https://") as caught:
        load_settings(env_file=None, slack_api_url=url)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("url", REFUSED)
def test_a_client_for_an_insecure_url_is_never_made(url: str) -> None:
    """Whoever builds a Slack client with such a URL gets the same refusal, not a client
    that would send the token in the clear (and the token is not in the message)."""
    with pytest.raises(ConfigError, match=r"^SLACK_API_URL must be an https:// URL") as caught:
        slack_client(BOT_TOKEN, url, timeout=5)
    assert BOT_TOKEN not in str(caught.value)


@given(st.ip_addresses())
def test_plain_http_is_accepted_only_to_a_loopback_address(address: object) -> None:
    """For every IP address: http to it is accepted exactly when it is loopback; https to
    it always is."""
    assert isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address)
    host = f"[{address}]" if address.version == 6 else str(address)
    assert carries_tokens_safely(f"http://{host}:8080/api/") == address.is_loopback
    assert carries_tokens_safely(f"https://{host}/api/")


async def test_serve_with_a_plain_http_api_url_exits_with_one_line(tmp_path: Path) -> None:
    """`threadgate serve` pointed at http://slack.example exits 2 before it sends anything,
    with one line naming SLACK_API_URL."""
    env = {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": "http://slack.example/api/",
        "THREADGATE_MODEL": "openai:gpt-test",
        "OPENAI_API_KEY": "sk-test",
        "DATABASE_URL": "postgresql://127.0.0.1:1/none",
    }
    status, stderr = await run_cli(["serve"], env, tmp_path)
    assert status == 2 and stderr.count("\n") == 1, stderr
    assert "SLACK_API_URL" in stderr and BOT_TOKEN not in stderr
