"""`.env.example` is a start a new operator can trust.

It names only real settings; copied to `.env` it is what `threadgate serve` (and so `make
run`) reads, and the command names the first value still to fill in; and each mode's block,
filled in as its comments say, is a complete configuration of that mode.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from gateway.config.settings import VARIABLES, Settings, load_settings
from tests.gateway.process import run_cli

EXAMPLE = Path(__file__).resolve().parent.parent / ".env.example"
_ASSIGNMENT = re.compile(r"^(?:# )?([A-Z][A-Z0-9_]*)=(.*)$")
# What an operator would paste for the values the example leaves empty: each of the shape
# the settings check (a bot token is xoxb-…, a client id digits.digits, a client secret 32
# hex digits).
FILLED = {
    "OPENAI_API_KEY": "sk-test",
    "ANTHROPIC_API_KEY": "sk-ant-test",
    "SLACK_BOT_TOKEN": "xoxb-1-2-test",
    "SLACK_APP_TOKEN": "xapp-1-A1-test",
    "SLACK_SIGNING_SECRET": "0123456789abcdef",
    "SLACK_CLIENT_ID": "1234.5678",
    "SLACK_CLIENT_SECRET": "0123456789abcdef0123456789abcdef",
    "THREADGATE_INSTALL_ALLOWLIST": "T0123ABCD",
    "THREADGATE_TOKEN_KEY": "bXVzdC1iZS0zMi1ieXRlcy1vZi11cmxzYWZlLWtleSE=",
    "THREADGATE_OPERATOR_CHANNEL": "C0123ABCD",
    "THREADGATE_ALERT_WEBHOOK_URL": "https://hooks.example/T0/B0/secret",
    "THREADGATE_ALLOWED_CHANNELS": "C0123ABCD",
    "THREADGATE_ALLOWED_USERS": "U0123ABCD",
}


def blocks() -> dict[str, list[str]]:
    """The example's lines by the `## ` heading they sit under ("" before the first)."""
    found: dict[str, list[str]] = {"": []}
    heading = ""
    for line in EXAMPLE.read_text(encoding="ascii").splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            found[heading] = []
        else:
            found[heading].append(line)
    return found


def filled(headings: list[str], *, delete: tuple[str, ...] = ()) -> str:
    """The example as an operator would make it for a mode: the blocks under `headings`
    uncommented and filled in, the others left as they are, the `delete`d variables gone."""
    lines = []
    for heading, block in blocks().items():
        for line in block:
            match = _ASSIGNMENT.match(line)
            if match is None:
                continue
            name, value = match.groups()
            if name in delete or (line.startswith("#") and heading not in headings):
                continue
            lines.append(f"{name}={value or FILLED[name]}")
    return "\n".join(lines) + "\n"


def test_the_example_names_only_real_settings() -> None:
    """Every variable the example sets or shows commented out is one Settings reads."""
    named = [m.group(1) for m in map(_ASSIGNMENT.match, EXAMPLE.read_text().splitlines()) if m]
    assert named and sorted(set(named) - set(VARIABLES)) == []


def test_the_example_is_ascii() -> None:
    """The example reads the same under any locale (a `.env` is read with the locale's)."""
    EXAMPLE.read_text(encoding="ascii")


def test_the_example_has_a_block_per_mode() -> None:
    """Every mode of docs/DEPLOY.md has its block, after what every mode needs, and
    production its own."""
    assert list(blocks()) == [
        "",
        "Every mode",
        "Socket Mode",
        "HTTP",
        "Many workspaces",
        "Production",
    ]


def settings_of(text: str, tmp_path: Path) -> Settings:
    env = tmp_path / ".env"
    env.write_text(text)
    return load_settings(env_file=env)


def test_socket_mode_filled_in_serves(tmp_path: Path) -> None:
    """The example with its empty values filled in is Socket Mode with one workspace, and
    complete for `serve`."""
    settings = settings_of(filled([]), tmp_path)
    settings.require_serve()
    assert settings.slack.socket_mode and not settings.slack.oauth_mode
    assert settings.models.specs == ("openai:gpt-4.1-mini",)


def test_http_as_its_block_says_serves(tmp_path: Path) -> None:
    """Deleting SLACK_APP_TOKEN and setting the HTTP block's secret is HTTP mode, complete."""
    text = filled(["HTTP"], delete=("SLACK_APP_TOKEN",))
    settings = settings_of(text, tmp_path)
    settings.require_serve()
    assert not settings.slack.socket_mode and settings.slack.signing_secret is not None


def test_oauth_as_its_block_says_serves(tmp_path: Path) -> None:
    """Deleting SLACK_BOT_TOKEN and filling the OAuth block is many workspaces, complete."""
    text = filled(["Many workspaces"], delete=("SLACK_BOT_TOKEN",))
    settings = settings_of(text, tmp_path)
    settings.require_serve()
    assert settings.slack.oauth_mode and settings.slack.socket_mode
    assert settings.slack.install_allowlist == {"T0123ABCD"}


def test_every_block_filled_in_at_once_is_valid(tmp_path: Path) -> None:
    """Production's values, as written, are valid settings too."""
    text = filled(["Every mode", "HTTP", "Production"], delete=("SLACK_APP_TOKEN",))
    settings = settings_of(text, tmp_path)
    settings.require_serve()
    assert settings.telemetry.log_format == "json" and settings.database.retention_days == 30


@pytest.mark.parametrize(
    ("exported", "named"),
    [({}, "SLACK_BOT_TOKEN"), ({"SLACK_BOT_TOKEN": "xoxb-1-2-test"}, "SLACK_APP_TOKEN")],
)
async def test_serve_reads_the_example_as_dotenv_and_names_what_is_missing(
    exported: dict[str, str], named: str, tmp_path: Path
) -> None:
    """Copied to `.env` as it is, the example is what `threadgate serve` reads: it ends with
    one sentence naming the first empty value it needs, the bot token, and with the bot token
    exported, the app token (the file's empty SLACK_APP_TOKEN chose Socket Mode)."""
    shutil.copy(EXAMPLE, tmp_path / ".env")
    env = {"DATABASE_URL": "postgresql://127.0.0.1:1/none", **exported}
    status, stderr = await run_cli(["serve"], env, tmp_path, dotenv=True)
    assert status == 2 and "Traceback" not in stderr
    assert stderr.count("\n") == 1 and f"{named} is not set" in stderr
