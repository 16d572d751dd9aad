"""The suite is hermetic: no `.env` and no shell settings reach a test gateway."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from gateway.config import load_settings
from tests import hermetic
from tests.gateway.process import child_cwd, run_cli
from tests.gateway.rig import rig_settings

ROOT = Path(__file__).resolve().parent.parent

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
    status, stderr = await run_cli(["serve"], SERVE, tmp_path, dotenv=True)
    assert status == 2 and "PORT" in stderr and stderr.count("\n") == 1


def test_a_child_will_not_start_beside_a_dotenv_it_was_not_meant_to_read(tmp_path: Path) -> None:
    """A test that starts a child in a directory holding a `.env` fails, unless it says
    the file is its own."""
    assert child_cwd(tmp_path) == tmp_path
    write_dotenv(tmp_path, REAL_LOOKING)
    with pytest.raises(AssertionError, match=r"\.env would configure the child"):
        child_cwd(tmp_path)
    assert child_cwd(tmp_path, dotenv=True) == tmp_path


# --- No shell settings ------------------------------------------------------------------


def test_scrub_removes_gateway_settings_and_keeps_what_the_suite_reads() -> None:
    """Every settings family, every unprefixed setting and proxies go, in any case;
    DATABASE_URL, THREADGATE_CHAOS_SCALE and the rest of the environment stay."""
    environ = {
        **REAL_LOOKING,
        "slack_bot_token": "xoxb-lowercase-is-read-too",
        "ANTHROPIC_API_KEY": "sk-ant-real",
        "THREADGATE_SOMETHING_NEW": "x",
        "PORT": "8080",
        "HTTPS_PROXY": "http://proxy.example.invalid:3128",
        "DATABASE_URL": "postgresql://127.0.0.1:5432/other",
        "THREADGATE_CHAOS_SCALE": "full",
        "PATH": "/usr/bin",
        "HOME": "/home/dev",
    }
    removed = hermetic.scrub(environ)
    assert environ == {
        "DATABASE_URL": "postgresql://127.0.0.1:5432/other",
        "THREADGATE_CHAOS_SCALE": "full",
        "PATH": "/usr/bin",
        "HOME": "/home/dev",
    }
    assert removed == sorted(removed) and "slack_bot_token" in removed and "PORT" in removed


def test_the_environment_holds_no_gateway_setting() -> None:
    """After the conftest, nothing in this process's environment configures a gateway."""
    assert [name for name in os.environ if hermetic.removed(name)] == []
    settings = load_settings()
    assert settings.slack_app_token is None and not settings.socket_mode
    assert settings.openai_api_key is None and settings.threadgate_alert_webhook_url is None


async def test_settings_exported_in_the_shell_are_gone_before_any_test_runs() -> None:
    """A pytest started with real-looking settings exported runs the test above, and passes:
    the conftest removed them before the first test (and before any gateway) could read them."""
    test = f"{Path(__file__).relative_to(ROOT)}::test_the_environment_holds_no_gateway_setting"
    env = {**os.environ, **REAL_LOOKING, "slack_signing_secret": "lowercase-too"}
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test),
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, out.decode()
    assert "1 passed" in out.decode()
