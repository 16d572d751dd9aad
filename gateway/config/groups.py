"""The settings' groups: each a frozen model of one concern, handed whole to what needs it.

A field has a short name (`settings.tasks.workers`) and declares the environment variable
it is read from, once, as its `validation_alias`; `Settings` (gateway/config/settings.py)
sorts the flat variables into their groups. Each group validates its own fields and
carries what is derived from them alone. The Slack-facing groups are in
gateway/config/slack_settings.py, the models' in gateway/config/model_settings.py.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import SplitResult, urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, field_validator

from agent import DEFAULT_ROUND, DEFAULT_RUNNER, McpConfig, ThreadQueueMode, load_mcp_config
from storage import (
    DEFAULT_ADMISSION_CONNECTIONS,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_PERSON_SCHEDULES,
    DEFAULT_PINNED_MAX,
    DEFAULT_THREAD_PICTURE_BYTES,
    DEFAULT_WORK_CONNECTIONS,
    DEFAULT_WORKSPACE_DAILY_PICTURE_BYTES,
    check_dsn,
)

# The kinds of files THREADGATE_FILE_TYPES may name (gateway/inbound/attachments.py reads them).
FILE_KINDS = ("image", "text", "pdf")
DEFAULT_METRICS_ADDRESS = "127.0.0.1:9090"

# What `serve` may run as (THREADGATE_ROLE, `serve --role`); see `ProcessSettings.role`.
Role = Literal["ingress", "worker", "all"]
ROLES: tuple[Role, ...] = ("ingress", "worker", "all")
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")
_DAY = 24 * 3600


def _ids(value: object) -> object:
    """A comma- or space-separated list of Slack ids, as a set."""
    return id_list(value) if isinstance(value, str) else value


# A list of Slack ids: written as text in the environment, held as a set.
Ids = Annotated[frozenset[str], BeforeValidator(_ids)]


class Group(BaseModel):
    """A group of settings: frozen, each field read from the variable its alias names."""

    model_config = ConfigDict(frozen=True, extra="ignore", validate_by_name=True)


class DatabaseSettings(Group):
    """Where the rows live, how many connections a process opens, and how long they are kept."""

    url: SecretStr | None = Field(default=None, validation_alias="DATABASE_URL")
    data_dir: Path = Field(default=Path(".threadgate"), validation_alias="THREADGATE_DATA_DIR")
    # The most connections a process opens for its statements (admissions' own apart): the
    # server's max_connections is shared by every replica (docs/DEPLOY.md: Postgres connections).
    connections: int = Field(
        default=DEFAULT_WORK_CONNECTIONS, ge=1, le=500, validation_alias="THREADGATE_DB_CONNECTIONS"
    )
    admission_connections: int = Field(
        default=DEFAULT_ADMISSION_CONNECTIONS,
        ge=0,
        le=64,
        validation_alias="THREADGATE_ADMISSION_CONNECTIONS",
    )
    lease_seconds: float = Field(
        default=DEFAULT_LEASE_SECONDS, gt=0, validation_alias="THREADGATE_LEASE_SECONDS"
    )
    # Days conversations and finished tasks are kept (0: forever), and how often the
    # retention job runs (storage/retention.py).
    retention_days: int = Field(
        default=0, ge=0, le=36_500, validation_alias="THREADGATE_RETENTION_DAYS"
    )
    retention_interval_seconds: float = Field(
        default=3600.0, ge=10, le=7 * _DAY, validation_alias="THREADGATE_RETENTION_INTERVAL_SECONDS"
    )
    # How long after an uninstall the workspace's stored content starts being erased:
    # time for a round still running there to stop (storage/erasure.py).
    erasure_delay_seconds: float = Field(
        default=60.0, ge=0, le=_DAY, validation_alias="THREADGATE_ERASURE_DELAY_SECONDS"
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_dsn(value.get_secret_value())  # a ValueError that never quotes the URL
        return value


class TaskSettings(Group):
    """How the workers answer a task: how many at once, its rounds, deferrals and time limits.
    The agent's own defaults, so each is written once (its modules say why)."""

    workers: int = Field(
        default=DEFAULT_RUNNER.workers, ge=1, le=256, validation_alias="THREADGATE_WORKERS"
    )
    max_rounds: int = Field(
        default=DEFAULT_RUNNER.max_rounds, ge=1, le=20, validation_alias="THREADGATE_MAX_ROUNDS"
    )
    subtask_timeout_seconds: float = Field(
        default=DEFAULT_RUNNER.subtask_timeout_seconds,
        gt=0,
        validation_alias="THREADGATE_SUBTASK_TIMEOUT_SECONDS",
    )
    task_timeout_seconds: float = Field(
        default=DEFAULT_RUNNER.task_timeout_seconds,
        gt=0,
        le=_DAY,
        validation_alias="THREADGATE_TASK_TIMEOUT_SECONDS",
    )
    max_deferrals: int = Field(
        default=DEFAULT_RUNNER.max_deferrals,
        ge=1,
        le=1000,
        validation_alias="THREADGATE_MAX_DEFERRALS",
    )
    max_deferral_seconds: float = Field(
        default=DEFAULT_RUNNER.max_deferral_seconds,
        gt=0,
        le=7 * _DAY,
        validation_alias="THREADGATE_MAX_DEFERRAL_SECONDS",
    )
    # While every model is down, a message this old by its next try gets the "still
    # trying" notice (agent/durable/runner.py, "Every model down").
    models_down_notice_seconds: float = Field(
        default=DEFAULT_RUNNER.still_trying_seconds,
        ge=0,
        le=7 * _DAY,
        validation_alias="THREADGATE_MODELS_DOWN_NOTICE_SECONDS",
    )
    # Unset: a notice per kind of failure (agent.FailureNotices); set: this text for all.
    failure_notice: str | None = Field(default=None, validation_alias="THREADGATE_FAILURE_NOTICE")
    # How a thread's messages that arrive while its task works are answered
    # (storage/thread_queue.py); a channel may say its own (THREADGATE_CHANNEL_CONFIG).
    thread_queue: ThreadQueueMode = Field(
        default="collect", validation_alias="THREADGATE_THREAD_QUEUE"
    )


class ToolSettings(Group):
    """The tools the agent may call: MCP servers, their limits, and approvals."""

    # MCP servers whose tools the agent may call (a JSON file in the `mcpServers` shape).
    mcp_file: Path | None = Field(default=None, validation_alias="THREADGATE_MCP_CONFIG")
    timeout_seconds: float = Field(
        default=DEFAULT_ROUND.tool_timeout_seconds,
        gt=0,
        le=3600,
        validation_alias="THREADGATE_TOOL_TIMEOUT_SECONDS",
    )
    output_chars: int = Field(
        default=DEFAULT_ROUND.tool_output_chars,
        ge=100,
        le=1_000_000,
        validation_alias="THREADGATE_TOOL_OUTPUT_CHARS",
    )
    # The people in the thread steer the agent (issue 31): a tool call that needs approval
    # (the MCP config's `requireApproval`) waits this long for a decision, then counts as
    # denied; besides the person who asked, these user ids may decide.
    approval_timeout_seconds: float = Field(
        default=DEFAULT_RUNNER.approval_timeout_seconds,
        gt=0,
        le=30 * 86400,
        validation_alias="THREADGATE_APPROVAL_TIMEOUT_SECONDS",
    )
    approvers: Ids = Field(
        default="", validation_alias="THREADGATE_APPROVERS", validate_default=True
    )
    # `search_workspace` through Slack's Real-time Search, as the person who asked
    # (gateway/slack/search.py); the manifest asks for its scopes only while it is on.
    workspace_search: bool = Field(default=False, validation_alias="THREADGATE_WORKSPACE_SEARCH")

    def mcp_config(self) -> McpConfig:
        """The MCP servers to connect (none when THREADGATE_MCP_CONFIG is unset); its
        `${VAR}` references are read from the process environment, here, like every
        other setting. A bad file is a ConfigError naming the variable."""
        if self.mcp_file is None:
            return McpConfig()
        return load_mcp_config(self.mcp_file, os.environ)


class MemorySettings(Group):
    """What the bot remembers (issue 12): the operator's instructions after the built-in
    system prompt (a change starts a new prompt epoch for new threads), the pinned messages
    kept per thread (the newest pins win), the history a round sees, summaries of what
    outgrows the window instead of dropping it, and the messages read back on a first mention."""

    instructions: str = Field(
        default="", max_length=20_000, validation_alias="THREADGATE_INSTRUCTIONS"
    )
    pinned_max: int = Field(
        default=DEFAULT_PINNED_MAX, ge=0, le=100, validation_alias="THREADGATE_PINNED_MAX"
    )
    compaction: bool = Field(default=True, validation_alias="THREADGATE_COMPACTION")
    history_chars: int = Field(
        default=DEFAULT_RUNNER.history_chars, ge=1000, validation_alias="THREADGATE_HISTORY_CHARS"
    )
    backfill_messages: int = Field(
        default=50, ge=0, le=1000, validation_alias="THREADGATE_BACKFILL_MESSAGES"
    )
    # The channel's recent messages a top-level mention carries (gateway/inbound/context.py).
    channel_context_messages: int = Field(
        default=15, ge=0, le=100, validation_alias="THREADGATE_CHANNEL_CONTEXT_MESSAGES"
    )


class LimitSettings(Group):
    """Guard rails against abuse and cost; 0 turns one off. Checked at admission, in Postgres."""

    user_messages_per_hour: int = Field(
        default=60, ge=0, validation_alias="THREADGATE_USER_MESSAGES_PER_HOUR"
    )
    thread_messages_per_hour: int = Field(
        default=40, ge=0, validation_alias="THREADGATE_THREAD_MESSAGES_PER_HOUR"
    )
    user_daily_tokens: int = Field(
        default=2_000_000, ge=0, validation_alias="THREADGATE_USER_DAILY_TOKENS"
    )
    channel_daily_tokens: int = Field(
        default=10_000_000, ge=0, validation_alias="THREADGATE_CHANNEL_DAILY_TOKENS"
    )
    # Tokens every workspace together may use per UTC day (0: no such budget).
    all_daily_tokens: int = Field(
        default=0, ge=0, validation_alias="THREADGATE_DAILY_TOKENS_ALL_WORKSPACES"
    )
    # USD a channel, and a workspace, may spend per UTC day (0: no limit); priced by
    # THREADGATE_PRICES over the built-in table (agent/models/prices.py).
    channel_daily_spend_usd: float = Field(
        default=0, ge=0, validation_alias="THREADGATE_CHANNEL_DAILY_SPEND_USD"
    )
    workspace_daily_spend_usd: float = Field(
        default=0, ge=0, validation_alias="THREADGATE_WORKSPACE_DAILY_SPEND_USD"
    )
    # A round asks the model a few times (tool steps, repairs); rounds × subtasks × retries
    # could reach ~190 requests for one message without this.
    model_requests_per_task: int = Field(
        default=60, ge=0, validation_alias="THREADGATE_MAX_MODEL_REQUESTS_PER_TASK"
    )
    # Pictures stored with their turns (storage/pictures.py): bytes per thread, and per
    # workspace per UTC day; past a budget a picture is not kept and its turn says so.
    thread_picture_bytes: int = Field(
        default=DEFAULT_THREAD_PICTURE_BYTES,
        ge=0,
        validation_alias="THREADGATE_THREAD_PICTURE_BYTES",
    )
    workspace_daily_picture_bytes: int = Field(
        default=DEFAULT_WORKSPACE_DAILY_PICTURE_BYTES,
        ge=0,
        validation_alias="THREADGATE_WORKSPACE_DAILY_PICTURE_BYTES",
    )


class FileSettings(Group):
    """Files on messages (gateway/inbound/files.py): the most read of one file, which kinds,
    and the child processes images and PDFs are decoded in (gateway/inbound/decoders.py):
    how many at once (past them a file is not read), and the address space each may take."""

    max_bytes: int = Field(
        default=10_000_000, ge=1, le=100_000_000, validation_alias="THREADGATE_FILE_MAX_BYTES"
    )
    kinds: frozenset[str] = Field(
        default=",".join(FILE_KINDS),
        validation_alias="THREADGATE_FILE_TYPES",
        validate_default=True,
    )
    decoders: int = Field(default=2, ge=1, le=64, validation_alias="THREADGATE_FILE_DECODERS")
    decode_memory_mb: int = Field(
        default=512, ge=128, le=65_536, validation_alias="THREADGATE_FILE_DECODE_MEMORY_MB"
    )

    @field_validator("kinds", mode="before")
    @classmethod
    def _kinds(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        kinds = frozenset(k.lower() for k in id_list(value))
        unknown = kinds - set(FILE_KINDS)
        if unknown:
            raise ValueError(
                f"expected a list of {', '.join(FILE_KINDS)}, not {sorted(unknown)[0]}"
            )
        return kinds


class DeliverySettings(Group):
    """How a reply shows itself while it is written."""

    streaming: bool = Field(default=True, validation_alias="THREADGATE_STREAMING")
    stream_interval_seconds: float = Field(
        default=1.0, ge=0.05, le=30, validation_alias="THREADGATE_STREAM_INTERVAL_SECONDS"
    )
    status_refresh_seconds: float = Field(
        default=90.0, gt=0, le=110, validation_alias="THREADGATE_STATUS_REFRESH_SECONDS"
    )
    # A reply sooner than this shows itself: no status, no Stop button (delivery/status.py).
    status_delay_seconds: float = Field(
        default=1.0, ge=0, le=60, validation_alias="THREADGATE_STATUS_DELAY_SECONDS"
    )


class ScheduleSettings(Group):
    """Schedules (gateway/schedules/scheduler.py): the shortest period one may have, and how
    late a period may be seen before a schedule that skips missed runs skips it. People's
    own, made by asking the bot, have a shortest period of their own (an operator's may
    run every minute; a conversation's should not), and caps: how many one person may
    have, and people in one channel together, active or waiting for approval."""

    min_period_seconds: int = Field(
        default=60, ge=1, le=86_400, validation_alias="THREADGATE_SCHEDULE_MIN_PERIOD_SECONDS"
    )
    person_min_period_seconds: int = Field(
        default=DEFAULT_PERSON_SCHEDULES.minimum_seconds,
        ge=1,
        le=7 * _DAY,
        validation_alias="THREADGATE_PERSON_SCHEDULE_MIN_PERIOD_SECONDS",
    )
    per_person: int = Field(
        default=DEFAULT_PERSON_SCHEDULES.caps.per_person,
        ge=1,
        le=1000,
        validation_alias="THREADGATE_SCHEDULES_PER_PERSON",
    )
    per_channel: int = Field(
        default=DEFAULT_PERSON_SCHEDULES.caps.per_channel,
        ge=1,
        le=10_000,
        validation_alias="THREADGATE_SCHEDULES_PER_CHANNEL",
    )
    late_seconds: float = Field(
        default=60.0, ge=1, le=86_400, validation_alias="THREADGATE_SCHEDULE_LATE_SECONDS"
    )


class TelemetrySettings(Group):
    """Logs, metrics and traces."""

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        default="INFO", validation_alias="THREADGATE_LOG_LEVEL"
    )
    log_format: Literal["text", "json"] = Field(
        default="text", validation_alias="THREADGATE_LOG_FORMAT"
    )
    # Metrics name models, Slack error codes and queue depth: not for the events port,
    # which faces the internet. Loopback by default; a container sets 0.0.0.0:9090.
    metrics_address: str = Field(
        default=DEFAULT_METRICS_ADDRESS, validation_alias="THREADGATE_METRICS_ADDRESS"
    )
    # Traces over OTLP/HTTP (gateway/telemetry/tracing.py): on when either is set; the
    # OpenTelemetry SDK reads its other OTEL_* variables itself.
    otlp_endpoint: str | None = Field(default=None, validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    otlp_traces: str | None = Field(
        default=None, validation_alias="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("metrics_address")
    @classmethod
    def _listen_address(cls, value: str) -> str:
        parse_address(value)
        return value

    @property
    def metrics_listen(self) -> tuple[str, int] | None:
        """Where /metrics is served (host, port), or None when it is off."""
        return parse_address(self.metrics_address)

    @property
    def tracing(self) -> bool:
        """Whether traces are exported (an OTLP endpoint is configured)."""
        return self.traces_endpoint is not None

    @property
    def traces_endpoint(self) -> str | None:
        """Where spans are sent: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else
        OTEL_EXPORTER_OTLP_ENDPOINT with the signal's path (`/v1/traces`), as OTLP says."""
        if self.otlp_traces:
            return self.otlp_traces
        base = self.otlp_endpoint
        return f"{base.rstrip('/')}/v1/traces" if base else None


class ProcessSettings(Group):
    """What this process runs, and how: its role (issue 16), its port, its event loop."""

    # Which parts `serve` runs: `ingress` verifies, admits and acks Slack's events; `worker`
    # answers the queued tasks; `all` both, in one process. `--role` wins over it.
    role: Role = Field(default="all", validation_alias="THREADGATE_ROLE")
    # Role `all`: the ingress on a thread with its own event loop, pool and Slack session,
    # so an ack never waits behind reply work's callbacks (gateway/process/ingress_thread.py).
    ingress_thread: bool = Field(default=True, validation_alias="THREADGATE_INGRESS_THREAD")
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        default="auto", validation_alias="THREADGATE_EVENT_LOOP"
    )
    port: int = Field(default=3000, ge=1, le=65535, validation_alias="PORT")
    # Everything before the ack must fit well inside Slack's 3 s, admission included.
    lookup_budget_seconds: float = Field(
        default=1.5, gt=0, le=2.5, validation_alias="THREADGATE_LOOKUP_BUDGET_SECONDS"
    )

    @property
    def serves_events(self) -> bool:
        """This process takes Slack's events (HTTP or Socket Mode): roles `ingress`, `all`."""
        return self.role != "worker"

    @property
    def ingress_apart(self) -> bool:
        """Role `all` with its ingress on a thread and loop of its own."""
        return self.role == "all" and self.ingress_thread

    @property
    def runs_workers(self) -> bool:
        """This process answers queued tasks (and prunes old rows): roles `worker`, `all`."""
        return self.role != "ingress"


_JSON_OPENERS = {"[": "a JSON list", "{": "a JSON object"}


def inline_or_file(value: str, *, opens: str) -> str:
    """A JSON setting's text: the value itself when it opens with `opens` (`[` or `{`),
    else the file it names; a `ValueError` (said of the setting) when that cannot be read.
    THREADGATE_ROUTES and THREADGATE_PRICES are read through it."""
    text = value.strip()
    if text[:1] in _JSON_OPENERS and not text.startswith(opens):
        # JSON of the other kind: a path cannot start with a bracket, so saying the file
        # cannot be read would send the operator looking for a file.
        raise ValueError(
            f"expected a file path or {_JSON_OPENERS[opens]}, not {_JSON_OPENERS[text[0]]}"
        )
    if text and not text.startswith(opens):
        try:
            text = Path(text).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"the file {value!r} cannot be read ({exc.strerror})") from None
    return text


def url_parts(text: str) -> SplitResult | None:
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - a malformed port raises here, not later
    except ValueError:
        return None
    return parts if parts.scheme and parts.netloc else None


def id_list(value: str) -> frozenset[str]:
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
