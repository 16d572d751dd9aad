"""A wrong or missing setting ends the command with one sentence naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import ConfigError
from gateway.process.config import load_settings
from gateway.process.service import provider_settings
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
    assert provider_settings(settings).timeout == 2.5 and settings.threadgate_model_attempts == 5
    with pytest.raises(ConfigError, match="THREADGATE_MODEL_TIMEOUT_SECONDS"):
        load_settings(threadgate_model_timeout_seconds="-1")
