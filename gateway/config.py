"""Settings: the one place the environment (and a `.env` file) is read.

Everything else takes explicit arguments. A missing or malformed setting becomes a
`ConfigError` whose message is one sentence naming the variable and what to put there;
the CLI prints that sentence and exits, never a traceback. Secret values are `SecretStr`
and are never echoed back, not even in an error about them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent import DEFAULT_GATEWAY_HEADER, DEFAULT_MODEL_TIMEOUT, VENDORS, ConfigError

OPENAI_BASE_URL = VENDORS["openai"].base_url
ANTHROPIC_BASE_URL = VENDORS["anthropic"].base_url

_HINTS = {
    "SLACK_BOT_TOKEN": "the bot token (xoxb-…) from your Slack app's OAuth & Permissions page",
    "SLACK_SIGNING_SECRET": "the signing secret from your Slack app's Basic Information page",
    "SLACK_APP_TOKEN": "an app-level token (xapp-…) with the connections:write scope",
    "THREADGATE_MODEL": "the model as provider:model, e.g. openai:gpt-4.1-mini",
}


class Settings(BaseSettings):
    """Every setting threadgate reads, by its environment variable name."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", case_sensitive=False)

    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_api_url: str = "https://slack.com/api/"
    database_url: SecretStr | None = None
    threadgate_data_dir: Path = Path(".threadgate")
    threadgate_model: str | None = None
    threadgate_fallback_model: str | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str = OPENAI_BASE_URL
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str = ANTHROPIC_BASE_URL
    threadgate_gateway_token: SecretStr | None = None
    threadgate_gateway_header: str = DEFAULT_GATEWAY_HEADER
    threadgate_operator_channel: str | None = None
    port: Annotated[int, Field(ge=1, le=65535)] = 3000
    # Workers mostly wait (on the model, on Slack), so many are cheap; 4 capped a gateway
    # at ~50 tasks/s against an instant model, and at 4 conversations with a real one.
    threadgate_workers: Annotated[int, Field(ge=1, le=256)] = 16
    threadgate_lease_seconds: Annotated[float, Field(gt=0)] = 60.0
    threadgate_history_chars: Annotated[int, Field(ge=1000)] = 24_000
    threadgate_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    threadgate_log_format: Literal["text", "json"] = "text"
    threadgate_allowed_channels: str = ""
    threadgate_allowed_users: str = ""
    threadgate_continue_threads: bool = True
    threadgate_backfill_messages: Annotated[int, Field(ge=0, le=1000)] = 50
    threadgate_max_rounds: Annotated[int, Field(ge=1, le=20)] = 4
    threadgate_subtask_timeout_seconds: Annotated[float, Field(gt=0)] = 300.0
    # Unset: a notice per kind of failure (agent.FailureNotices); set: this text for all.
    threadgate_failure_notice: str | None = None
    threadgate_alert_webhook_url: SecretStr | None = None
    threadgate_model_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = DEFAULT_MODEL_TIMEOUT
    threadgate_model_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    threadgate_max_output_tokens: Annotated[int, Field(ge=64, le=200_000)] = 4096
    threadgate_status_refresh_seconds: Annotated[float, Field(gt=0, le=110)] = 90.0
    threadgate_alert_window_seconds: Annotated[float, Field(ge=0)] = 900.0
    # One Slack call's time limit, its waits after 429s included. A post whose call went
    # unanswered is looked for in its thread only once the call must be over: this long
    # after it started plus the settle margin (how long Slack may take to show it).
    threadgate_slack_timeout_seconds: Annotated[float, Field(gt=0, le=300)] = 15.0
    threadgate_slack_settle_seconds: Annotated[float, Field(ge=0, le=300)] = 5.0

    @field_validator("threadgate_log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @property
    def allowed_channels(self) -> frozenset[str]:
        return _id_list(self.threadgate_allowed_channels)

    @property
    def allowed_users(self) -> frozenset[str]:
        return _id_list(self.threadgate_allowed_users)

    @property
    def socket_mode(self) -> bool:
        return self.slack_app_token is not None

    def require(self, variable: str) -> str:
        """The value of a required variable, or a ConfigError saying what to put there."""
        value = getattr(self, variable.lower())
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if not value:
            hint = _HINTS.get(variable, "a value")
            raise ConfigError(f"{variable} is not set: put {hint} there.")
        return str(value)

    def require_serve(self) -> None:
        """Check what `threadgate serve` cannot run without."""
        token = self.require("SLACK_BOT_TOKEN")
        if not token.startswith("xoxb-"):
            raise ConfigError(
                f"SLACK_BOT_TOKEN does not look like a bot token: put {_HINTS['SLACK_BOT_TOKEN']} there."
            )
        if self.socket_mode:
            if not self.require("SLACK_APP_TOKEN").startswith("xapp-"):
                raise ConfigError(
                    f"SLACK_APP_TOKEN does not look like an app token: put {_HINTS['SLACK_APP_TOKEN']} there."
                )
        else:
            self.require("SLACK_SIGNING_SECRET")
        self.require("THREADGATE_MODEL")


def load_settings(**overrides: object) -> Settings:
    """Read the environment once; malformed values become one-sentence ConfigErrors."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(describe(exc)) from None


def describe(exc: ValidationError) -> str:
    first = exc.errors()[0]
    variable = str(first["loc"][0]).upper() if first["loc"] else "a setting"
    # The input is deliberately not repeated: it may be a secret put in the wrong variable.
    return f"{variable} is invalid ({first['msg'].lower()}); fix or unset it."


def _id_list(value: str) -> frozenset[str]:
    """A comma- or space-separated list of Slack ids."""
    return frozenset(part for part in value.replace(",", " ").split() if part)
