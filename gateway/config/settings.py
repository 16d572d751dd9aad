"""Settings: the one place the environment (and a `.env` file) is read.

Everything else takes explicit arguments. A missing or malformed setting becomes a
`ConfigError` whose message is one sentence naming the variable and what to put there;
the CLI prints that sentence and exits, never a traceback. Secret values are `SecretStr`
and are never echoed back, not even in an error about them.

Which `.env`, if any, is the caller's choice: the `threadgate` command passes the one in
its working directory; everything else (the tests above all) passes none, so a developer's
local file cannot configure a gateway that did not ask for it.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import SplitResult, unquote, urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent import (
    DEFAULT_GATEWAY_HEADER,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_MODEL_TIMEOUT,
    DEFAULT_PRICE_TABLE,
    DEFAULT_ROUND,
    DEFAULT_RUNNER,
    VENDORS,
    ConfigError,
    McpConfig,
    PriceTable,
    RetryPolicy,
    RouteConfig,
    Sampling,
    installed_providers,
    load_mcp_config,
    parse_prices,
    parse_spec,
)
from gateway.config.channel_config import EMPTY as NO_CHANNEL_CONFIG
from gateway.config.channel_config import ChannelConfig, load_channel_config
from gateway.config.route_config import (
    VARIABLE as ROUTES_VARIABLE,
)
from gateway.config.route_config import (
    parse_routes,
    parse_stop_sequences,
    routes_json,
)
from gateway.slack.client import carries_tokens_safely
from gateway.slack.manifest import DESCRIPTION, SuggestedPrompt, parse_prompts
from storage import (
    DEFAULT_ADMISSION_CONNECTIONS,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_PINNED_MAX,
    DEFAULT_THREAD_PICTURE_BYTES,
    DEFAULT_WORK_CONNECTIONS,
    DEFAULT_WORKSPACE_DAILY_PICTURE_BYTES,
    is_token_key,
    start_embedded_postgres,
)

# The kinds of files THREADGATE_FILE_TYPES may name (gateway/inbound/attachments.py reads them).
FILE_KINDS = ("image", "text", "pdf")
OPENAI_BASE_URL = VENDORS["openai"].base_url
ANTHROPIC_BASE_URL = VENDORS["anthropic"].base_url

_HINTS = {
    "SLACK_BOT_TOKEN": "the bot token (xoxb-…) from your Slack app's OAuth & Permissions page",
    "SLACK_SIGNING_SECRET": "the signing secret from your Slack app's Basic Information page",
    "SLACK_APP_TOKEN": "an app-level token (xapp-…) with the connections:write scope",
    "THREADGATE_MODEL": "the model as provider:model, e.g. openai:gpt-4.1-mini",
    "SLACK_CLIENT_ID": "the client id (digits.digits) from your Slack app's Basic Information page",
    "SLACK_CLIENT_SECRET": "the client secret from your Slack app's Basic Information page",
}
# Slack's app credentials: the client id is two numbers joined by a dot, the secret 32 hex
# digits. Checked so a value pasted into the wrong variable is caught before the first install.
_CLIENT_ID = re.compile(r"[0-9]{1,20}\.[0-9]{1,20}")
_CLIENT_SECRET = re.compile(r"[0-9a-f]{32}")


DEFAULT_METRICS_ADDRESS = "127.0.0.1:9090"

# What `serve` may run as (THREADGATE_ROLE, `serve --role`); see `Settings.threadgate_role`.
Role = Literal["ingress", "worker", "all"]
ROLES: tuple[Role, ...] = ("ingress", "worker", "all")
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")


class Settings(BaseSettings):
    """Every setting threadgate reads, by its environment variable name."""

    # No `env_file` here: reading one is `load_settings`'s explicit parameter, not a default.
    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False)

    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_api_url: str = "https://slack.com/api/"
    database_url: SecretStr | None = None
    threadgate_data_dir: Path = Path(".threadgate")
    threadgate_model: str | None = None
    threadgate_fallback_model: str | None = None
    # The fallback chain as a list of routes, each its own provider, model, base URL and
    # key (gateway/config/route_config.py); THREADGATE_MODEL and _FALLBACK_MODEL are the
    # two-route shorthand. Inline JSON, or a file holding it.
    threadgate_routes: str = ""
    # Sampling for every request that sets none (a route's own win; a model that takes
    # none is not sent them). Unset: the provider's defaults.
    threadgate_temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    threadgate_top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    threadgate_stop_sequences: str = ""
    # Send the provider an opaque id of the person asked for (OpenAI `user`, Anthropic
    # `metadata.user_id`): a hash, never the Slack id (gateway/models/routes.py says why).
    threadgate_send_user_id: bool = False
    openai_api_key: SecretStr | None = None
    openai_base_url: str = OPENAI_BASE_URL
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str = ANTHROPIC_BASE_URL
    threadgate_gateway_token: SecretStr | None = None
    threadgate_gateway_header: str = DEFAULT_GATEWAY_HEADER
    threadgate_operator_channel: str | None = None
    port: Annotated[int, Field(ge=1, le=65535)] = 3000
    # Metrics name models, Slack error codes and queue depth: not for the events port,
    # which faces the internet. Loopback by default; a container sets 0.0.0.0:9090.
    threadgate_metrics_address: str = DEFAULT_METRICS_ADDRESS
    # The agent's and storage's own defaults, so each is written once (their modules say why).
    threadgate_workers: Annotated[int, Field(ge=1, le=256)] = DEFAULT_RUNNER.workers
    threadgate_lease_seconds: Annotated[float, Field(gt=0)] = DEFAULT_LEASE_SECONDS
    threadgate_admission_connections: Annotated[int, Field(ge=0, le=64)] = (
        DEFAULT_ADMISSION_CONNECTIONS
    )
    # The most connections a process opens for its statements (admissions' own apart): the
    # server's max_connections is shared by every replica (README: Postgres connections).
    threadgate_db_connections: Annotated[int, Field(ge=1, le=500)] = DEFAULT_WORK_CONNECTIONS
    threadgate_history_chars: Annotated[int, Field(ge=1000)] = DEFAULT_RUNNER.history_chars
    threadgate_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    threadgate_log_format: Literal["text", "json"] = "text"
    threadgate_event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    threadgate_allowed_channels: str = ""
    threadgate_allowed_users: str = ""
    threadgate_continue_threads: bool = True
    # Slack's agent messaging experience (issue 31): the manifest's `agent_view`, with this
    # description and these suggested prompts (also offered when someone opens the DM), and
    # every DM message a thread of its own in the DM's one conversation; false: the
    # retiring `assistant_view`, where each DM thread is a conversation of its own.
    threadgate_agent_view: bool = True
    threadgate_agent_description: Annotated[str, Field(min_length=1, max_length=1000)] = DESCRIPTION
    threadgate_suggested_prompts: str = ""
    threadgate_backfill_messages: Annotated[int, Field(ge=0, le=1000)] = 50
    # Everything before the ack must fit well inside Slack's 3 s, admission included.
    threadgate_lookup_budget_seconds: Annotated[float, Field(gt=0, le=2.5)] = 1.5
    threadgate_max_rounds: Annotated[int, Field(ge=1, le=20)] = DEFAULT_RUNNER.max_rounds
    threadgate_subtask_timeout_seconds: Annotated[float, Field(gt=0)] = (
        DEFAULT_RUNNER.subtask_timeout_seconds
    )
    # Unset: a notice per kind of failure (agent.FailureNotices); set: this text for all.
    threadgate_failure_notice: str | None = None
    threadgate_alert_webhook_url: SecretStr | None = None
    threadgate_model_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = DEFAULT_MODEL_TIMEOUT
    threadgate_model_attempts: Annotated[int, Field(ge=1, le=10)] = RetryPolicy().attempts_per_slot
    # The wait before a slot's first retry after a transient failure (doubling, jittered).
    threadgate_model_retry_seconds: Annotated[float, Field(ge=0, le=60)] = RetryPolicy().base_delay
    threadgate_max_output_tokens: Annotated[int, Field(ge=64, le=200_000)] = (
        DEFAULT_MAX_OUTPUT_TOKENS
    )
    threadgate_max_deferrals: Annotated[int, Field(ge=1, le=1000)] = DEFAULT_RUNNER.max_deferrals
    threadgate_max_deferral_seconds: Annotated[float, Field(gt=0, le=7 * 24 * 3600)] = (
        DEFAULT_RUNNER.max_deferral_seconds
    )
    # While every model is down, a message this old by its next try gets the "still
    # trying" notice (agent/durable/runner.py, "Every model down").
    threadgate_models_down_notice_seconds: Annotated[float, Field(ge=0, le=7 * 24 * 3600)] = (
        DEFAULT_RUNNER.still_trying_seconds
    )
    threadgate_task_timeout_seconds: Annotated[float, Field(gt=0, le=24 * 3600)] = (
        DEFAULT_RUNNER.task_timeout_seconds
    )
    threadgate_tool_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = (
        DEFAULT_ROUND.tool_timeout_seconds
    )
    threadgate_tool_output_chars: Annotated[int, Field(ge=100, le=1_000_000)] = (
        DEFAULT_ROUND.tool_output_chars
    )
    threadgate_status_refresh_seconds: Annotated[float, Field(gt=0, le=110)] = 90.0
    # A reply sooner than this shows itself: no status, no Stop button (delivery/status.py).
    threadgate_status_delay_seconds: Annotated[float, Field(ge=0, le=60)] = 1.0
    threadgate_streaming: bool = True
    threadgate_stream_interval_seconds: Annotated[float, Field(ge=0.05, le=30)] = 1.0
    threadgate_alert_window_seconds: Annotated[float, Field(ge=0)] = 900.0
    # Guard rails against abuse and cost; 0 turns one off. Checked at admission, in Postgres.
    threadgate_user_messages_per_hour: Annotated[int, Field(ge=0)] = 60
    threadgate_thread_messages_per_hour: Annotated[int, Field(ge=0)] = 40
    threadgate_user_daily_tokens: Annotated[int, Field(ge=0)] = 2_000_000
    threadgate_channel_daily_tokens: Annotated[int, Field(ge=0)] = 10_000_000
    # Tokens every workspace together may use per UTC day (0: no such budget).
    threadgate_daily_tokens_all_workspaces: Annotated[int, Field(ge=0)] = 0
    # USD a channel, and a workspace, may spend per UTC day (0: no limit); priced by
    # THREADGATE_PRICES over the built-in table (agent/models/prices.py).
    threadgate_channel_daily_spend_usd: Annotated[float, Field(ge=0)] = 0
    threadgate_workspace_daily_spend_usd: Annotated[float, Field(ge=0)] = 0
    # Prices per provider:model added to the built-in ones: inline JSON, or a file holding it.
    threadgate_prices: str = ""
    # Requests name their conversation and mark their stable prefix for the providers'
    # prompt caches (agent/rounds/caching.py); off for a server that refuses the fields.
    threadgate_prompt_caching: bool = True
    # Traces over OTLP/HTTP (gateway/telemetry/tracing.py): on when either is set; the
    # OpenTelemetry SDK reads its other OTEL_* variables itself.
    otel_exporter_otlp_endpoint: str | None = None
    otel_exporter_otlp_traces_endpoint: str | None = None
    # A round asks the model a few times (tool steps, repairs); rounds × subtasks × retries
    # could reach ~190 requests for one message without this.
    threadgate_max_model_requests_per_task: Annotated[int, Field(ge=0)] = 60

    # One Slack call's time limit, its waits after 429s included. A post whose call went
    # unanswered is looked for in its thread only once the call must be over: this long
    # after it started plus the settle margin (how long Slack may take to show it).
    threadgate_slack_timeout_seconds: Annotated[float, Field(gt=0, le=300)] = 15.0
    threadgate_slack_settle_seconds: Annotated[float, Field(ge=0, le=300)] = 5.0
    # Seconds `serve` waits for the Socket Mode connection's hello before it gives up.
    threadgate_socket_connect_timeout: Annotated[float, Field(gt=0, le=600)] = 30.0
    # MCP servers whose tools the agent may call (a JSON file in the `mcpServers` shape).
    threadgate_mcp_config: Path | None = None
    # Each channel's tools, instructions, models, limits and Slack Connect answer (a JSON
    # file, gateway/config/channel_config.py; read again on SIGHUP).
    threadgate_channel_config: Path | None = None
    # Files on messages (gateway/inbound/files.py): the most read of one file, and which kinds.
    threadgate_file_max_bytes: Annotated[int, Field(ge=1, le=100_000_000)] = 10_000_000
    threadgate_file_types: str = ",".join(FILE_KINDS)
    # Pictures stored with their turns (storage/pictures.py): bytes per thread, and per
    # workspace per UTC day; past a budget a picture is not kept and its turn says so.
    threadgate_thread_picture_bytes: Annotated[int, Field(ge=0)] = DEFAULT_THREAD_PICTURE_BYTES
    threadgate_workspace_daily_picture_bytes: Annotated[int, Field(ge=0)] = (
        DEFAULT_WORKSPACE_DAILY_PICTURE_BYTES
    )
    # Images and PDFs are decoded in child processes (gateway/inbound/decoders.py): how many
    # at once (past them a file is not read), and the address space each may take.
    threadgate_file_decoders: Annotated[int, Field(ge=1, le=64)] = 2
    threadgate_file_decode_memory_mb: Annotated[int, Field(ge=128, le=65_536)] = 512
    # Which parts `serve` runs (issue 16): `ingress` verifies, admits and acks Slack's events;
    # `worker` answers the queued tasks; `all` both, in one process. `--role` wins over it.
    threadgate_role: Role = "all"
    # Role `all`: the ingress on a thread with its own event loop, pool and Slack session,
    # so an ack never waits behind reply work's callbacks (gateway/process/ingress_thread.py).
    threadgate_ingress_thread: bool = True

    @field_validator("threadgate_stop_sequences")
    @classmethod
    def _stops(cls, value: str) -> str:
        parse_stop_sequences(value)  # a ValueError names what is wrong
        return value

    @field_validator("threadgate_routes")
    @classmethod
    def _routes(cls, value: str) -> str:
        routes_json(value)  # the file must be readable; its content is read by `routes`
        return value

    @property
    def sampling(self) -> Sampling:
        """The deployment's sampling settings (THREADGATE_TEMPERATURE, _TOP_P, _STOP_SEQUENCES)."""
        return Sampling(
            self.threadgate_temperature,
            self.threadgate_top_p,
            parse_stop_sequences(self.threadgate_stop_sequences),
        )

    def routes(self, *, keys: bool = True) -> tuple[RouteConfig, ...]:
        """The fallback chain: THREADGATE_ROUTES, or THREADGATE_MODEL then
        THREADGATE_FALLBACK_MODEL (none when neither is set). A route without a base URL
        is reached by its vendor's settings (OPENAI_BASE_URL and OPENAI_API_KEY, …).
        Keys named `${VAR}` are read from the process environment, here; without `keys`
        they are not (an ingress, which calls no model, may not have them)."""
        known = tuple(installed_providers())
        if self.threadgate_routes.strip():
            if self.threadgate_model or self.threadgate_fallback_model:
                raise ConfigError(
                    f"{ROUTES_VARIABLE} and THREADGATE_MODEL/THREADGATE_FALLBACK_MODEL are both "
                    f"set: list every route in {ROUTES_VARIABLE}, or unset it."
                )
            text = routes_json(self.threadgate_routes)
            return parse_routes(text, os.environ if keys else None, known=known)
        named = (
            ("THREADGATE_MODEL", self.threadgate_model),
            ("THREADGATE_FALLBACK_MODEL", self.threadgate_fallback_model),
        )
        return tuple(
            RouteConfig(*parse_spec(spec, variable=variable, known=known))
            for variable, spec in named
            if spec
        )

    def route_for(self, spec: str, *, variable: str) -> RouteConfig:
        """The route a channel's `provider:model` stands for: the deployment's route of that
        spec; else one to that model by the first route of its provider (its base URL and
        key); else by the vendor's settings."""
        provider, model = parse_spec(spec, variable=variable, known=tuple(installed_providers()))
        routes = self.routes()
        same = [r for r in routes if r.spec == f"{provider}:{model}"]
        if same:
            return same[0]
        kin = [r for r in routes if r.provider == provider]
        if kin:
            return RouteConfig(
                provider,
                model,
                kin[0].base_url,
                kin[0].api_key,
                kin[0].credential,
                sampling=kin[0].sampling,
            )
        return RouteConfig(provider, model)

    @field_validator("threadgate_prices")
    @classmethod
    def _prices(cls, value: str) -> str:
        prices_json(value)  # a ValueError names what is wrong
        return value

    def price_table(self) -> PriceTable:
        """The built-in prices with THREADGATE_PRICES's entries over them."""
        text = prices_json(self.threadgate_prices)
        return DEFAULT_PRICE_TABLE.with_entries(parse_prices(text) if text else {})

    @property
    def tracing(self) -> bool:
        """Whether traces are exported (an OTLP endpoint is configured)."""
        return self.otlp_traces_endpoint is not None

    @property
    def otlp_traces_endpoint(self) -> str | None:
        """Where spans are sent: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else
        OTEL_EXPORTER_OTLP_ENDPOINT with the signal's path (`/v1/traces`), as OTLP says."""
        if self.otel_exporter_otlp_traces_endpoint:
            return self.otel_exporter_otlp_traces_endpoint
        base = self.otel_exporter_otlp_endpoint
        return f"{base.rstrip('/')}/v1/traces" if base else None

    @field_validator("threadgate_suggested_prompts")
    @classmethod
    def _prompts(cls, value: str) -> str:
        parse_prompts(value)  # a ValueError names what is wrong
        return value

    @property
    def suggested_prompts(self) -> tuple[SuggestedPrompt, ...]:
        """The prompts offered in the DM with the app (THREADGATE_SUGGESTED_PROMPTS)."""
        return parse_prompts(self.threadgate_suggested_prompts)

    @field_validator("threadgate_file_types")
    @classmethod
    def _file_kinds(cls, value: str) -> str:
        unknown = {k.lower() for k in _id_list(value)} - set(FILE_KINDS)
        if unknown:
            raise ValueError(
                f"expected a list of {', '.join(FILE_KINDS)}, not {sorted(unknown)[0]}"
            )
        return value

    @property
    def file_kinds(self) -> frozenset[str]:
        """The kinds of files read for the model (none when THREADGATE_FILE_TYPES is empty)."""
        return frozenset(k.lower() for k in _id_list(self.threadgate_file_types))

    # What the bot remembers (issue 12): the operator's instructions after the built-in
    # system prompt (a change starts a new prompt epoch for new threads), the pinned
    # messages kept per thread (the newest pins win), and summaries of what outgrows the
    # window instead of dropping it.
    threadgate_instructions: Annotated[str, Field(max_length=20_000)] = ""
    threadgate_pinned_max: Annotated[int, Field(ge=0, le=100)] = DEFAULT_PINNED_MAX
    threadgate_compaction: bool = True
    # Days conversations and finished tasks are kept (0: forever), and how often the
    # retention job runs (storage/retention.py).
    threadgate_retention_days: Annotated[int, Field(ge=0, le=36_500)] = 0
    threadgate_retention_interval_seconds: Annotated[float, Field(ge=10, le=7 * 24 * 3600)] = 3600.0
    # Many workspaces (Slack's OAuth install flow) instead of one SLACK_BOT_TOKEN.
    slack_client_id: str | None = None
    slack_client_secret: SecretStr | None = None
    threadgate_oauth_redirect_url: str | None = None
    # The workspace whose THREADGATE_OPERATOR_CHANNEL gets operator alerts (OAuth mode);
    # unset: the workspace installed first.
    threadgate_operator_team: str | None = None
    # Seals the bot tokens in the database (storage/token_cipher.py); unset: stored as issued.
    threadgate_token_key: SecretStr | None = None
    # The teams (T…) and enterprises (E…) that may install (OAuth mode); unset: anyone.
    threadgate_install_allowlist: str = ""
    # OAuth states (one per visit of the public install page) outstanding at most.
    threadgate_oauth_states_max: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    # The people in the thread steer the agent (issue 31): a tool call that needs approval
    # (the MCP config's `requireApproval`) waits this long for a decision, then counts as
    # denied; besides the person who asked, these user ids may decide.
    threadgate_approval_timeout_seconds: Annotated[float, Field(gt=0, le=30 * 86400)] = (
        DEFAULT_RUNNER.approval_timeout_seconds
    )
    threadgate_approvers: str = ""
    # Schedules (gateway/schedules/scheduler.py): the shortest period one may have, and how
    # late a period may be seen before a schedule that skips missed runs skips it.
    threadgate_schedule_min_period_seconds: Annotated[int, Field(ge=1, le=86_400)] = 60
    threadgate_schedule_late_seconds: Annotated[float, Field(ge=1, le=86_400)] = 60.0

    @field_validator("threadgate_token_key")
    @classmethod
    def _token_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not is_token_key(value.get_secret_value()):
            raise ValueError(
                "expected a Fernet key (urlsafe base64 of 32 bytes), e.g. from "
                "`python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`"
            )
        return value

    @field_validator("slack_api_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        if not carries_tokens_safely(value):
            raise ValueError(
                "expected an https:// URL, or plain http to a loopback address such as "
                "127.0.0.1: every call sends the bot token there"
            )
        return value

    @field_validator("threadgate_oauth_redirect_url")
    @classmethod
    def _redirect_url(cls, value: str | None) -> str | None:
        parts = _url_parts(value) if value else None
        if value and (parts is None or parts.scheme not in ("https", "http")):
            raise ValueError("expected the full https:// URL of /slack/oauth_redirect")
        return value

    @field_validator("threadgate_metrics_address")
    @classmethod
    def _listen_address(cls, value: str) -> str:
        parse_address(value)
        return value

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
    def approvers(self) -> frozenset[str]:
        """Who may decide on any approval request, besides the person who asked."""
        return _id_list(self.threadgate_approvers)

    @property
    def install_allowlist(self) -> frozenset[str]:
        return _id_list(self.threadgate_install_allowlist)

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """Where /metrics is served (host, port), or None when it is off."""
        return parse_address(self.threadgate_metrics_address)

    @property
    def serves_events(self) -> bool:
        """This process takes Slack's events (HTTP or Socket Mode): roles `ingress`, `all`."""
        return self.threadgate_role != "worker"

    @property
    def ingress_apart(self) -> bool:
        """Role `all` with its ingress on a thread and loop of its own."""
        return self.threadgate_role == "all" and self.threadgate_ingress_thread

    @property
    def runs_workers(self) -> bool:
        """This process answers queued tasks (and prunes old rows): roles `worker`, `all`."""
        return self.threadgate_role != "ingress"

    @property
    def socket_mode(self) -> bool:
        return self.slack_app_token is not None

    @property
    def oauth_mode(self) -> bool:
        """Many workspaces through Slack's OAuth install flow (else one, SLACK_BOT_TOKEN)."""
        return self.slack_client_id is not None or self.slack_client_secret is not None

    def mcp_config(self) -> McpConfig:
        """The MCP servers to connect (none when THREADGATE_MCP_CONFIG is unset); its
        `${VAR}` references are read from the process environment, here, like every
        other setting. A bad file is a ConfigError naming the variable."""
        if self.threadgate_mcp_config is None:
            return McpConfig()
        return load_mcp_config(self.threadgate_mcp_config, os.environ)

    def channel_config(self) -> ChannelConfig:
        """The channel policies (none when THREADGATE_CHANNEL_CONFIG is unset: the default
        everywhere); a bad file is a ConfigError naming the variable, the file and the field."""
        if self.threadgate_channel_config is None:
            return NO_CHANNEL_CONFIG
        return load_channel_config(self.threadgate_channel_config)

    @property
    def model_specs(self) -> tuple[str, ...]:
        """The chain's `provider:model`s in order (THREADGATE_ROUTES', or THREADGATE_MODEL
        then THREADGATE_FALLBACK_MODEL, those that are set)."""
        if self.threadgate_routes.strip():
            return tuple(route.spec for route in self.routes())
        specs = (self.threadgate_model, self.threadgate_fallback_model)
        return tuple(spec for spec in specs if spec)

    def secret_values(self) -> list[str]:
        """What the log must never show: every secret setting's value, and the parts of
        URLs that carry one — a password in any URL setting (a database or proxy URL), the
        path and query of the alert webhook (its token; the host is not secret) — and the
        MCP servers' secrets (`${VAR}` values, headers, env)."""
        values: list[str] = []
        # A bad file is reported where it is used; one we cannot read holds no values.
        with contextlib.suppress(ConfigError):
            values += self.mcp_config().secrets()
        with contextlib.suppress(ConfigError, ValueError):
            values += [r.api_key.get_secret_value() for r in self.routes() if r.api_key]
        for value in self.model_dump().values():
            text = value.get_secret_value() if isinstance(value, SecretStr) else value
            if not isinstance(text, str) or not text:
                continue
            if isinstance(value, SecretStr):
                values.append(text)
            parts = _url_parts(text)
            if parts is not None and parts.password:
                values += [parts.password, unquote(parts.password)]
        if self.slack_client_id and self.slack_client_secret:
            # oauth.v2.access sends them as HTTP basic auth, which slack_sdk's debug log shows.
            pair = f"{self.slack_client_id}:{self.slack_client_secret.get_secret_value()}"
            values.append(base64.b64encode(pair.encode()).decode("ascii"))
        webhook = self.threadgate_alert_webhook_url
        parts = _url_parts(webhook.get_secret_value()) if webhook else None
        if parts is not None:
            values += [parts.path, parts.query, f"{parts.path}?{parts.query}"]
        return [v for v in dict.fromkeys(values) if v.strip("/?")]

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
        if self.oauth_mode:
            self.require_oauth()
        else:
            token = self.require("SLACK_BOT_TOKEN")
            if not token.startswith("xoxb-"):
                raise ConfigError(
                    f"SLACK_BOT_TOKEN does not look like a bot token: put {_HINTS['SLACK_BOT_TOKEN']} there."
                )
        # An ingress calls no model; a worker takes no events, so needs neither the signing
        # secret nor the app token.
        if self.serves_events and self.socket_mode:
            if not self.require("SLACK_APP_TOKEN").startswith("xapp-"):
                raise ConfigError(
                    f"SLACK_APP_TOKEN does not look like an app token: put {_HINTS['SLACK_APP_TOKEN']} there."
                )
        elif self.serves_events:
            self.require("SLACK_SIGNING_SECRET")
        if self.runs_workers:
            self.require_routes()

    def require_routes(self) -> tuple[RouteConfig, ...]:
        """The fallback chain, which a process calling models cannot run without."""
        routes = self.routes()
        if not routes:
            raise ConfigError(
                f"THREADGATE_MODEL is not set: put {_HINTS['THREADGATE_MODEL']} there, or list "
                f"the fallback chain in {ROUTES_VARIABLE}."
            )
        return routes

    def require_oauth(self) -> None:
        """Check the OAuth mode's settings: both app credentials, well-formed, and no
        SLACK_BOT_TOKEN beside them (exactly one of the two modes). A worker runs no
        install flow — it only reads the stored tokens — so it needs no client secret
        (one given is still checked)."""
        if self.slack_bot_token is not None:
            raise ConfigError(
                "SLACK_BOT_TOKEN and SLACK_CLIENT_ID/SLACK_CLIENT_SECRET are both set: set "
                "SLACK_BOT_TOKEN for one workspace, or the client id and secret for many, not both."
            )
        needed = [("SLACK_CLIENT_ID", _CLIENT_ID)]
        if self.serves_events or self.slack_client_secret is not None:
            needed.append(("SLACK_CLIENT_SECRET", _CLIENT_SECRET))
        for variable, shape in needed:
            if not shape.fullmatch(self.require(variable)):
                raise ConfigError(
                    f"{variable} does not look like one: put {_HINTS[variable]} there."
                )


def load_settings(*, env_file: Path | str | None = None, **overrides: object) -> Settings:
    """Read the environment once, and `env_file` if one is given and exists (a variable set
    in the environment wins over the file); malformed values become one-sentence
    ConfigErrors."""
    try:
        # `_env_file` is pydantic-settings' per-call choice of file (None: none); mypy sees
        # only the fields in the synthesized signature.
        return Settings(_env_file=env_file, **overrides)  # type: ignore[arg-type, call-arg]
    except ValidationError as exc:
        raise ConfigError(describe(exc)) from None


def prices_json(value: str) -> str:
    """THREADGATE_PRICES's JSON: the value itself when it is an object, else the file it
    names; a `ValueError` (said of the setting) when either is wrong."""
    text = value.strip()
    if text and not text.startswith("{"):
        try:
            text = Path(text).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"the file {value!r} cannot be read ({exc.strerror})") from None
    if text:
        parse_prices(text)
    return text


async def database_dsn(settings: Settings) -> str:
    """The database the settings name: DATABASE_URL, else the embedded server in
    THREADGATE_DATA_DIR (started, or joined if it runs). Here rather than with the wiring
    in gateway/process/: `migrate`, `tasks` and the other short commands need it
    without loading the rest of a gateway."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    return await start_embedded_postgres(settings.threadgate_data_dir)


def describe(exc: ValidationError) -> str:
    first = exc.errors()[0]
    variable = str(first["loc"][0]).upper() if first["loc"] else "a setting"
    # The input is deliberately not repeated: it may be a secret put in the wrong variable.
    return f"{variable} is invalid ({first['msg'].lower()}); fix or unset it."


def _url_parts(text: str) -> SplitResult | None:
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - a malformed port raises here, not later
    except ValueError:
        return None
    return parts if parts.scheme and parts.netloc else None


def _id_list(value: str) -> frozenset[str]:
    """A comma- or space-separated list of Slack ids."""
    return frozenset(part for part in value.replace(",", " ").split() if part)


def parse_address(value: str) -> tuple[str, int] | None:
    """`HOST:PORT` (`[v6]:PORT` for IPv6) as (host, port); empty or `off` is None.
    Port 0 asks the system for a free one."""
    text = value.strip()
    if text.lower() in ("", "off"):
        return None
    host, _, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        valid_host = _is_ip(host, version=6)
    else:
        valid_host = _is_ip(host, version=4) or bool(_HOSTNAME.fullmatch(host))
    if not (valid_host and port.isascii() and port.isdigit() and int(port) <= 65535):
        raise ValueError("expected HOST:PORT such as 127.0.0.1:9090 or [::1]:9090, or off")
    return host, int(port)


def _is_ip(text: str, *, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False
