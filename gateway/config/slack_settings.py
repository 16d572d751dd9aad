"""The Slack-facing settings' groups: the app's credentials and API, its agent view in the
DM, who and where it answers, and where operator alerts go.

Groups of `Settings` (gateway/config/settings.py), each validated here; the rest are in
gateway/config/groups.py, which says how a group names its variables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from gateway.config.channel_config import EMPTY as NO_CHANNEL_CONFIG
from gateway.config.channel_config import ChannelConfig, load_channel_config
from gateway.config.groups import Group, Ids, url_parts
from gateway.slack.bot_policy import BotPolicy, LoopGuard
from gateway.slack.client import carries_tokens_safely
from gateway.slack.commands import DEFAULT_SLASH_COMMAND, check_command_name
from gateway.slack.manifest import DESCRIPTION, SuggestedPrompt, parse_prompts
from storage import is_token_key

# A command that prints a new THREADGATE_TOKEN_KEY, pasted as it is into a shell: only
# Python's standard library (a Fernet key is 32 random bytes in urlsafe base64), and
# `python3`, the name every distribution gives it.
NEW_TOKEN_KEY = (
    "python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())'"
)


class SlackSettings(Group):
    """Slack: the credentials of one workspace or of the OAuth install flow, the API, time limits."""

    bot_token: SecretStr | None = Field(default=None, validation_alias="SLACK_BOT_TOKEN")
    signing_secret: SecretStr | None = Field(default=None, validation_alias="SLACK_SIGNING_SECRET")
    app_token: SecretStr | None = Field(default=None, validation_alias="SLACK_APP_TOKEN")
    api_url: str = Field(default="https://slack.com/api/", validation_alias="SLACK_API_URL")
    # One Slack call's time limit, its waits after 429s included. A post whose call went
    # unanswered is looked for in its thread only once the call must be over: this long
    # after it started plus the settle margin (how long Slack may take to show it).
    timeout_seconds: float = Field(
        default=15.0, gt=0, le=300, validation_alias="THREADGATE_SLACK_TIMEOUT_SECONDS"
    )
    settle_seconds: float = Field(
        default=5.0, ge=0, le=300, validation_alias="THREADGATE_SLACK_SETTLE_SECONDS"
    )
    # Seconds `serve` waits for the Socket Mode connection's hello before it gives up.
    socket_connect_timeout: float = Field(
        default=30.0, gt=0, le=600, validation_alias="THREADGATE_SOCKET_CONNECT_TIMEOUT"
    )
    # How Slack paces conversations.replies and .history for this app: `internal` (Tier 3),
    # `limited` (a distributed app outside the Marketplace: one call a minute per method
    # per workspace, 15 messages), `auto`: found per workspace (gateway/slack/read_pacing.py).
    read_tier: Literal["auto", "internal", "limited"] = Field(
        default="auto", validation_alias="THREADGATE_SLACK_READ_TIER"
    )
    # Many workspaces (Slack's OAuth install flow) instead of one SLACK_BOT_TOKEN.
    client_id: str | None = Field(default=None, validation_alias="SLACK_CLIENT_ID")
    client_secret: SecretStr | None = Field(default=None, validation_alias="SLACK_CLIENT_SECRET")
    oauth_redirect_url: str | None = Field(
        default=None, validation_alias="THREADGATE_OAUTH_REDIRECT_URL"
    )
    # Seals the bot tokens in the database (storage/token_cipher.py); unset: stored as issued.
    token_key: SecretStr | None = Field(default=None, validation_alias="THREADGATE_TOKEN_KEY")
    # The teams (T…) and enterprises (E…) that may install (OAuth mode); unset: anyone.
    install_allowlist: Ids = Field(
        default="", validation_alias="THREADGATE_INSTALL_ALLOWLIST", validate_default=True
    )

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        if not carries_tokens_safely(value):
            raise ValueError(
                "expected an https:// URL, or plain http to a loopback address such as "
                "127.0.0.1: every call sends the bot token there"
            )
        return value

    @field_validator("oauth_redirect_url")
    @classmethod
    def _redirect_url(cls, value: str | None) -> str | None:
        parts = url_parts(value) if value else None
        if value and (parts is None or parts.scheme not in ("https", "http")):
            raise ValueError("expected the full https:// URL of /slack/oauth_redirect")
        return value

    @field_validator("token_key")
    @classmethod
    def _token_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not is_token_key(value.get_secret_value()):
            raise ValueError(
                f"expected a Fernet key (urlsafe base64 of 32 bytes), e.g. from `{NEW_TOKEN_KEY}`"
            )
        return value

    @property
    def socket_mode(self) -> bool:
        return self.app_token is not None

    @property
    def oauth_mode(self) -> bool:
        """Many workspaces through Slack's OAuth install flow (else one, SLACK_BOT_TOKEN)."""
        return self.client_id is not None or self.client_secret is not None


class AssistantSettings(Group):
    """Slack's agent messaging experience (issue 31): the manifest's `agent_view`, with this
    description and these suggested prompts (also offered when someone opens the DM), and
    every DM message a thread of its own in the DM's one conversation; false: the retiring
    `assistant_view`, where each DM thread is a conversation of its own. And the app's other
    surfaces (issue 45): the slash command's name, and how the App Home is kept current."""

    agent_view: bool = Field(default=True, validation_alias="THREADGATE_AGENT_VIEW")
    description: str = Field(
        default=DESCRIPTION,
        min_length=1,
        max_length=1000,
        validation_alias="THREADGATE_AGENT_DESCRIPTION",
    )
    prompts: str = Field(default="", validation_alias="THREADGATE_SUGGESTED_PROMPTS")
    # The slash command's name (gateway/inbound/slash.py), as the manifest declares it.
    slash_command: str = Field(
        default=DEFAULT_SLASH_COMMAND, validation_alias="THREADGATE_SLASH_COMMAND"
    )
    # How often the Home views of people who opened it lately are checked for changes
    # (gateway/inbound/home_tab.py); 0: published only when opened or clicked.
    home_refresh_seconds: float = Field(
        default=10.0, ge=0, le=3600, validation_alias="THREADGATE_HOME_REFRESH_SECONDS"
    )

    @field_validator("slash_command")
    @classmethod
    def _slash_command(cls, value: str) -> str:
        return check_command_name(value)  # a ValueError says what to write

    @field_validator("prompts")
    @classmethod
    def _prompts(cls, value: str) -> str:
        parse_prompts(value)  # a ValueError names what is wrong
        return value

    @property
    def suggested_prompts(self) -> tuple[SuggestedPrompt, ...]:
        """The prompts offered in the DM with the app (THREADGATE_SUGGESTED_PROMPTS)."""
        return parse_prompts(self.prompts)


class AccessSettings(Group):
    """Who and where the bot answers, and each channel's policy."""

    allowed_channels: Ids = Field(
        default="", validation_alias="THREADGATE_ALLOWED_CHANNELS", validate_default=True
    )
    allowed_users: Ids = Field(
        default="", validation_alias="THREADGATE_ALLOWED_USERS", validate_default=True
    )
    continue_threads: bool = Field(default=True, validation_alias="THREADGATE_CONTINUE_THREADS")
    # Which bots' mentions are answered, and how many bot turns a thread takes per window
    # (gateway/inbound/bots.py).
    allow_bots: str = Field(default="none", validation_alias="THREADGATE_ALLOW_BOTS")
    bot_turns_per_thread: int = Field(
        default=5, ge=1, le=1000, validation_alias="THREADGATE_BOT_TURNS_PER_THREAD"
    )
    bot_turns_window_seconds: float = Field(
        default=3600.0, gt=0, le=7 * 86400, validation_alias="THREADGATE_BOT_TURNS_WINDOW_SECONDS"
    )
    # Each channel's tools, instructions, models, limits and Slack Connect answer (a JSON
    # file, gateway/config/channel_config.py; read again on SIGHUP).
    channel_file: Path | None = Field(default=None, validation_alias="THREADGATE_CHANNEL_CONFIG")

    @field_validator("allow_bots")
    @classmethod
    def _allow_bots(cls, value: str) -> str:
        BotPolicy.parse(value)  # a wrong value says what to write
        return value

    @property
    def bot_policy(self) -> BotPolicy:
        return BotPolicy.parse(self.allow_bots)

    @property
    def loop_guard(self) -> LoopGuard:
        return LoopGuard(self.bot_turns_per_thread, self.bot_turns_window_seconds)

    def channel_config(self) -> ChannelConfig:
        """The channel policies (none when THREADGATE_CHANNEL_CONFIG is unset: the default
        everywhere); a bad file is a ConfigError naming the variable, the file and the field."""
        if self.channel_file is None:
            return NO_CHANNEL_CONFIG
        return load_channel_config(self.channel_file)


class AlertSettings(Group):
    """Where operator alerts go, and how often one kind may repeat."""

    operator_channel: str | None = Field(
        default=None, validation_alias="THREADGATE_OPERATOR_CHANNEL"
    )
    # The workspace whose THREADGATE_OPERATOR_CHANNEL gets operator alerts (OAuth mode);
    # unset: the workspace installed first.
    operator_team: str | None = Field(default=None, validation_alias="THREADGATE_OPERATOR_TEAM")
    webhook_url: SecretStr | None = Field(
        default=None, validation_alias="THREADGATE_ALERT_WEBHOOK_URL"
    )
    window_seconds: float = Field(
        default=900.0, ge=0, validation_alias="THREADGATE_ALERT_WINDOW_SECONDS"
    )
    # Opt-in: the operators hear when every model route is down and when one is back
    # (gateway/process/outages.py), each once per window.
    models_down: bool = Field(default=False, validation_alias="THREADGATE_MODELS_DOWN_ALERT")
