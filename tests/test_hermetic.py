"""The suite is hermetic: a developer's `.env` never configures a test gateway."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import load_settings
from tests.gateway.process import run_cli
from tests.gateway.rig import rig_settings

# What a developer might keep in `.env` (or export) for `make run`; none of it may reach a test.
REAL_LOOKING = {
    "SLACK_APP_TOKEN": "xapp-1-A0REAL-from-the-developer",
    "THREADGATE_FALLBACK_MODEL": "openai:gpt-real",
    "THREADGATE_ALERT_WEBHOOK_URL": "https://hooks.example.invalid/real",
    "OPENAI_API_KEY": "sk-real",
}

# Enough for `threadgate serve` to get past its settings, on loopback only.
SERVE = {
    "SLACK_BOT_TOKEN": "xoxb-1",
    "SLACK_SIGNING_SECRET": "s3cr3t-value",
    "THREADGATE_MODEL": "openai:gpt-test",
    "OPENAI_API_KEY": "sk-test",
    "DATABASE_URL": "postgresql://127.0.0.1:1/none",
}


def write_dotenv(directory: Path, values: dict[str, str]) -> None:
    (directory / ".env").write_text("".join(f"{k}={v}\n" for k, v in values.items()))


# --- No `.env` --------------------------------------------------------------------------


def test_load_settings_reads_a_dotenv_only_when_given_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `.env` in the working directory is ignored by default and read when named."""
    write_dotenv(tmp_path, REAL_LOOKING)
    monkeypatch.chdir(tmp_path)
    ignored = load_settings()
    assert ignored.slack_app_token is None and ignored.threadgate_fallback_model is None
    read = load_settings(env_file=".env")  # what the `threadgate` command passes
    assert read.slack_app_token is not None and read.threadgate_fallback_model == "openai:gpt-real"


def test_the_rigs_settings_ignore_a_dotenv_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An in-process test gateway stays in HTTP mode, with no fallback model or webhook,
    beside a `.env` that would give it all three."""
    write_dotenv(tmp_path, REAL_LOOKING)
    monkeypatch.chdir(tmp_path)
    settings = rig_settings(SERVE)
    assert not settings.socket_mode
    assert settings.threadgate_fallback_model is None
    assert settings.threadgate_alert_webhook_url is None
    assert settings.openai_api_key is not None
    assert settings.openai_api_key.get_secret_value() == "sk-test"


async def test_the_threadgate_command_still_reads_the_dotenv_of_its_directory(
    tmp_path: Path,
) -> None:
    """Production is unchanged: `threadgate serve` reads `./.env` (here a bad PORT, which
    stops it with one sentence before it touches anything)."""
    write_dotenv(tmp_path, {"PORT": "abc"})
    status, stderr = await run_cli(["serve"], SERVE, tmp_path)
    assert status == 2 and "PORT" in stderr and stderr.count("\n") == 1
