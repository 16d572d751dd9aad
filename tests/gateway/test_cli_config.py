"""A wrong or missing setting ends the command with one sentence naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import ConfigError
from gateway.config.connections import ConnectionPlan
from gateway.config.settings import load_settings
from gateway.models.routes import provider_settings
from tests.gateway.process import run_cli

COMPLETE = {
    "SLACK_BOT_TOKEN": "xoxb-1",
    "SLACK_SIGNING_SECRET": "s3cr3t-value",
    "THREADGATE_MODEL": "openai:gpt-test",
    "OPENAI_API_KEY": "sk-test",
    "DATABASE_URL": "postgresql://127.0.0.1:1/none",
}


@pytest.mark.parametrize(
    "variable", ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "THREADGATE_MODEL"]
)
async def test_serve_without_a_required_setting_names_it(variable: str, tmp_path: Path) -> None:
    """`serve` with one required variable missing exits 2 with one line naming it."""
    env = {k: v for k, v in COMPLETE.items() if k != variable}
    status, stderr = await run_cli(["serve"], env, tmp_path)
    assert status == 2
    assert stderr.count("\n") == 1 and variable in stderr and "Traceback" not in stderr


async def test_malformed_port_names_the_variable_without_echoing(tmp_path: Path) -> None:
    """PORT=abc is named in one sentence."""
    status, stderr = await run_cli(["serve"], {**COMPLETE, "PORT": "abc"}, tmp_path)
    assert status == 2 and "PORT" in stderr and stderr.count("\n") == 1


async def test_unreachable_database_is_one_sentence_without_the_secret(tmp_path: Path) -> None:
    """A DATABASE_URL that cannot be reached ends in one line that names it, not its value."""
    env = {**COMPLETE, "DATABASE_URL": "postgresql://user:hunter2@127.0.0.1:1/db"}
    status, stderr = await run_cli(["migrate"], env, tmp_path)
    assert status == 1 and "DATABASE_URL" in stderr and "hunter2" not in stderr
    assert stderr.count("\n") == 1


def test_model_timeout_and_attempts_reach_the_providers_and_the_ladder() -> None:
    """THREADGATE_MODEL_TIMEOUT_SECONDS sets the providers' timeout; a bad value is named."""
    settings = load_settings(threadgate_model_timeout_seconds="2.5", threadgate_model_attempts="5")
    assert provider_settings(settings).timeout == 2.5 and settings.models.attempts == 5
    with pytest.raises(ConfigError, match="THREADGATE_MODEL_TIMEOUT_SECONDS"):
        load_settings(threadgate_model_timeout_seconds="-1")


def test_prices_and_spend_limits_are_read_and_a_bad_one_names_its_variable(
    tmp_path: Path,
) -> None:
    """THREADGATE_PRICES inline or as a file adds to the built-in table; a malformed one,
    a missing file or a negative spend limit ends in one sentence naming the variable."""
    inline = '{"openai:local": {"input": 1, "output": 2}}'
    assert load_settings(threadgate_prices=inline).models.price_table().price("openai:local")
    (tmp_path / "prices.json").write_text(inline)
    from_file = load_settings(threadgate_prices=str(tmp_path / "prices.json"))
    assert from_file.models.price_table().price("openai:local") is not None
    assert from_file.models.price_table().price("anthropic:claude-sonnet-4-5") is not None
    for value in ('{"openai:local": {"input": 1}}', str(tmp_path / "absent.json"), "{"):
        with pytest.raises(ConfigError, match=r"^THREADGATE_PRICES is invalid"):
            load_settings(threadgate_prices=value)
    with pytest.raises(ConfigError, match="THREADGATE_CHANNEL_DAILY_SPEND_USD"):
        load_settings(threadgate_channel_daily_spend_usd="-1")


def test_the_traces_endpoint_follows_the_otlp_variables() -> None:
    """The general endpoint gets the signal's path; the traces one is used as it is."""
    assert load_settings().telemetry.traces_endpoint is None
    general = load_settings(otel_exporter_otlp_endpoint="http://collector:4318/")
    assert general.telemetry.traces_endpoint == "http://collector:4318/v1/traces"
    traces = load_settings(
        otel_exporter_otlp_endpoint="http://a:4318",
        otel_exporter_otlp_traces_endpoint="http://b:4318/custom",
    )
    assert traces.telemetry.traces_endpoint == "http://b:4318/custom"


@pytest.mark.parametrize(
    ("role", "settings", "opened"),
    [
        ("all", {}, 20 + 1 + 8 + 2),
        ("all", {"threadgate_ingress_thread": "false"}, 20 + 1 + 2),
        ("ingress", {}, 20 + 2),
        ("worker", {}, 20 + 1),
        ("all", {"threadgate_db_connections": "4"}, 4 + 1 + 4 + 2),
    ],
)
def test_the_connections_a_process_opens_follow_its_role(
    role: str, settings: dict[str, str], opened: int
) -> None:
    """What a process opens at most: its pool (THREADGATE_DB_CONNECTIONS), the workers'
    LISTEN session, an ingress's admission connections, role all's ingress thread pool."""
    loaded = load_settings(env_file=None, threadgate_role=role, **settings)
    assert ConnectionPlan.of(loaded).total == opened
