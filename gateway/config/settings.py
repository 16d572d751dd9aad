"""Settings: the one place the environment (and a `.env` file) is read.

Everything else takes explicit arguments. `Settings` holds the groups
(gateway/config/groups.py, gateway/config/model_settings.py), each handed whole to the part
that needs it; every environment variable is flat (`THREADGATE_WORKERS`, read
case-insensitively) and its field names it once, so `Settings` sorts the variables into
their groups. A missing or malformed setting becomes a `ConfigError` whose message is one
sentence naming the variable and what to put there; the CLI prints that sentence and
exits, never a traceback. Secret values are `SecretStr` and are never echoed back, not
even in an error about them.

Which `.env`, if any, is the caller's choice: the `threadgate` command passes the one in
its working directory; everything else (the tests above all) passes none, so a developer's
local file cannot configure a gateway that did not ask for it.
"""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from agent import ConfigError, RouteConfig
from gateway.config.groups import (
    DEFAULT_METRICS_ADDRESS,
    FILE_KINDS,
    ROLES,
    DatabaseSettings,
    DeliverySettings,
    FileSettings,
    Group,
    LimitSettings,
    MemorySettings,
    ProcessSettings,
    Role,
    ScheduleSettings,
    TaskSettings,
    TelemetrySettings,
    ToolSettings,
    parse_address,
    url_parts,
)
from gateway.config.model_settings import ModelSettings, prices_json
from gateway.config.route_config import VARIABLE as ROUTES_VARIABLE
from gateway.config.slack_settings import (
    AccessSettings,
    AlertSettings,
    AssistantSettings,
    SlackSettings,
)
from storage import start_embedded_postgres

__all__ = [
    "DEFAULT_METRICS_ADDRESS",
    "FILE_KINDS",
    "ROLES",
    "VARIABLES",
    "Role",
    "Settings",
    "database_dsn",
    "describe",
    "load_settings",
    "load_settings_leniently",
    "parse_address",
    "prices_json",
]

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

# Each group as `Settings` holds it: its attribute name, and its model.
GROUPS: dict[str, type[Group]] = {
    "slack": SlackSettings,
    "assistant": AssistantSettings,
    "access": AccessSettings,
    "database": DatabaseSettings,
    "models": ModelSettings,
    "tasks": TaskSettings,
    "tools": ToolSettings,
    "memory": MemorySettings,
    "limits": LimitSettings,
    "files": FileSettings,
    "delivery": DeliverySettings,
    "schedules": ScheduleSettings,
    "alerts": AlertSettings,
    "telemetry": TelemetrySettings,
    "process": ProcessSettings,
}


class Place(NamedTuple):
    """Where a variable's value lives: its group's attribute on `Settings`, and its field."""

    group: str
    field: str


def _places() -> dict[str, Place]:
    places: dict[str, Place] = {}
    for group, model in GROUPS.items():
        for name, field in model.model_fields.items():
            assert isinstance(field.validation_alias, str), f"{model.__name__}.{name}"
            assert field.validation_alias not in places, field.validation_alias
            places[field.validation_alias] = Place(group, name)
    return places


# Every environment variable Settings reads, upper case, and where its value lives.
PLACES = _places()
# Every environment variable Settings reads, with its field (its type and default).
VARIABLES: dict[str, FieldInfo] = {
    variable: GROUPS[group].model_fields[field] for variable, (group, field) in PLACES.items()
}


class _Variables(PydanticBaseSettingsSource):
    """The variables a source (the environment, a `.env` file) holds that Settings reads,
    flat and lower case, as the environment names them: `Settings` sorts them into groups.
    (pydantic-settings' own sources would look for a variable per group: `SLACK`, `TASKS`.)"""

    def __init__(self, source: EnvSettingsSource) -> None:
        super().__init__(source.settings_cls)
        self._found = {
            name.lower(): value
            for name, value in source.env_vars.items()
            if value is not None and name.upper() in PLACES
        }

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: `__call__` answers for every field at once

    def __call__(self) -> dict[str, Any]:
        return dict(self._found)


class Settings(BaseSettings):
    """Every setting threadgate reads, in its group."""

    # No `env_file` here: reading one is `load_settings`'s explicit parameter, not a default.
    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False)

    slack: SlackSettings = Field(default_factory=SlackSettings)
    assistant: AssistantSettings = Field(default_factory=AssistantSettings)
    access: AccessSettings = Field(default_factory=AccessSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    models: ModelSettings = Field(default_factory=ModelSettings)
    tasks: TaskSettings = Field(default_factory=TaskSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    files: FileSettings = Field(default_factory=FileSettings)
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    schedules: ScheduleSettings = Field(default_factory=ScheduleSettings)
    alerts: AlertSettings = Field(default_factory=AlertSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    process: ProcessSettings = Field(default_factory=ProcessSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then the environment, then the `.env` file: each flat."""
        assert isinstance(env_settings, EnvSettingsSource)
        assert isinstance(dotenv_settings, EnvSettingsSource)  # a DotEnvSettingsSource
        return init_settings, _Variables(env_settings), _Variables(dotenv_settings)

    @model_validator(mode="before")
    @classmethod
    def _sort(cls, data: object) -> object:
        """Flat variables (any case) into their groups; a group given whole stays as given."""
        if not isinstance(data, Mapping):
            return data
        sorted_: dict[str, Any] = {group: {} for group in GROUPS}
        for key, value in data.items():
            place = PLACES.get(str(key).upper())
            if key in GROUPS:
                given = sorted_[key]
                sorted_[key] = value if not isinstance(value, Mapping) else {**given, **value}
            elif place is not None and isinstance(sorted_[place.group], dict):
                sorted_[place.group].setdefault(str(key).upper(), value)
        return sorted_

    @classmethod
    def field(cls, variable: str) -> FieldInfo:
        """The field a variable is read into (its type, its default)."""
        return VARIABLES[variable]

    def value(self, variable: str) -> object:
        """The value of the setting a variable names."""
        place = PLACES[variable.upper()]
        return getattr(getattr(self, place.group), place.field)

    def replace(self, **flat: object) -> Settings:
        """A copy with some settings changed, named as their variables (`threadgate_role=`)
        and validated like them."""
        changed: dict[str, Any] = {}
        for key, value in flat.items():
            group = PLACES[key.upper()].group
            given = changed.get(group) or getattr(self, group).model_dump(by_alias=True)
            changed[group] = {**given, VARIABLES[key.upper()].validation_alias: value}
        try:
            update = {g: GROUPS[g].model_validate(v) for g, v in changed.items()}
        except ValidationError as exc:
            raise ConfigError(describe(exc)) from None
        return self.model_copy(update=update)

    def secret_values(self) -> list[str]:
        """What the log must never show: every secret setting's value, and the parts of
        URLs that carry one — a password in any URL setting (a database or proxy URL), the
        path and query of the alert webhook (its token; the host is not secret) — and the
        MCP servers' secrets (`${VAR}` values, headers, env)."""
        values: list[str] = []
        # A bad file is reported where it is used; one we cannot read holds no values.
        with contextlib.suppress(ConfigError):
            values += self.tools.mcp_config().secrets()
        with contextlib.suppress(ConfigError, ValueError):
            values += [r.api_key.get_secret_value() for r in self.models.routes() if r.api_key]
        for value in (self.value(variable) for variable in PLACES):
            text = value.get_secret_value() if isinstance(value, SecretStr) else value
            if not isinstance(text, str) or not text:
                continue
            if isinstance(value, SecretStr):
                values.append(text)
            parts = url_parts(text)
            if parts is not None and parts.password:
                values += [parts.password, unquote(parts.password)]
        slack = self.slack
        if slack.client_id and slack.client_secret:
            # oauth.v2.access sends them as HTTP basic auth, which slack_sdk's debug log shows.
            pair = f"{slack.client_id}:{slack.client_secret.get_secret_value()}"
            values.append(base64.b64encode(pair.encode()).decode("ascii"))
        webhook = self.alerts.webhook_url
        parts = url_parts(webhook.get_secret_value()) if webhook else None
        if parts is not None:
            values += [parts.path, parts.query, f"{parts.path}?{parts.query}"]
        return [v for v in dict.fromkeys(values) if v.strip("/?")]

    def require(self, variable: str) -> str:
        """The value of a required variable, or a ConfigError saying what to put there."""
        value = self.value(variable)
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if not value:
            hint = _HINTS.get(variable, "a value")
            raise ConfigError(f"{variable} is not set: put {hint} there.")
        return str(value)

    def require_serve(self) -> None:
        """Check what `threadgate serve` cannot run without (the first problem raises)."""
        for check in self.serve_checks():
            check()

    def serve_checks(self) -> list[Callable[[], object]]:
        """What `threadgate serve` cannot run without, one check per setting, each raising
        a ConfigError: `serve` stops at the first, `doctor` runs them all."""
        checks: list[Callable[[], object]] = [
            self.require_oauth if self.slack.oauth_mode else self._require_bot_token
        ]
        # An ingress calls no model; a worker takes no events, so needs neither the signing
        # secret nor the app token.
        if self.process.serves_events and self.slack.socket_mode:
            checks.append(self._require_app_token)
        elif self.process.serves_events:
            checks.append(lambda: self.require("SLACK_SIGNING_SECRET"))
        if self.process.runs_workers:
            checks.append(self.require_routes)
        return checks

    def _require_bot_token(self) -> None:
        if not self.require("SLACK_BOT_TOKEN").startswith("xoxb-"):
            raise ConfigError(
                f"SLACK_BOT_TOKEN does not look like a bot token: put {_HINTS['SLACK_BOT_TOKEN']} there."
            )

    def _require_app_token(self) -> None:
        if not self.require("SLACK_APP_TOKEN").startswith("xapp-"):
            raise ConfigError(
                f"SLACK_APP_TOKEN does not look like an app token: put {_HINTS['SLACK_APP_TOKEN']} there."
            )

    def require_routes(self) -> tuple[RouteConfig, ...]:
        """The fallback chain, which a process calling models cannot run without."""
        routes = self.models.routes()
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
        if self.slack.bot_token is not None:
            raise ConfigError(
                "SLACK_BOT_TOKEN and SLACK_CLIENT_ID/SLACK_CLIENT_SECRET are both set: set "
                "SLACK_BOT_TOKEN for one workspace, or the client id and secret for many, not both."
            )
        needed = [("SLACK_CLIENT_ID", _CLIENT_ID)]
        if self.process.serves_events or self.slack.client_secret is not None:
            needed.append(("SLACK_CLIENT_SECRET", _CLIENT_SECRET))
        for variable, shape in needed:
            if not shape.fullmatch(self.require(variable)):
                raise ConfigError(
                    f"{variable} does not look like one: put {_HINTS[variable]} there."
                )


def load_settings(*, env_file: Path | str | None = None, **overrides: object) -> Settings:
    """Read the environment once, and `env_file` if one is given and exists (a variable set
    in the environment wins over the file); `overrides` are named as the variables are
    (`threadgate_role="all"`) and win over both. Malformed values become one-sentence
    ConfigErrors."""
    try:
        # `_env_file` is pydantic-settings' per-call choice of file (None: none); mypy sees
        # only the fields in the synthesized signature.
        return Settings(_env_file=env_file, **overrides)  # type: ignore[arg-type, call-arg]
    except ValidationError as exc:
        raise ConfigError(describe(exc)) from None


async def database_dsn(settings: Settings) -> str:
    """The database the settings name: DATABASE_URL, else the embedded server in
    THREADGATE_DATA_DIR (started, or joined if it runs). Here rather than with the wiring
    in gateway/process/: `migrate`, `tasks` and the other short commands need it
    without loading the rest of a gateway."""
    if settings.database.url is not None:
        return settings.database.url.get_secret_value()
    return await start_embedded_postgres(settings.database.data_dir)


def load_settings_leniently(
    *, env_file: Path | str | None = None
) -> tuple[Settings, list[ConfigError]]:
    """The settings with every malformed variable at its default, and a ConfigError for each
    of them: `doctor` reports them all and still checks everything else. A problem that
    names no single variable (one between several) is raised, as `load_settings` does."""
    problems: dict[str, ConfigError] = {}
    while True:
        try:
            settings = Settings(_env_file=env_file, **_defaults(problems))  # type: ignore[arg-type, call-arg]
        except ValidationError as exc:
            found = {_variable(e): ConfigError(_sentence(e)) for e in exc.errors()}
            if any(v not in PLACES or v in problems for v in found):
                raise ConfigError(describe(exc)) from None
            problems.update(found)
            continue
        return settings, list(problems.values())


def _defaults(variables: Mapping[str, object]) -> dict[str, object]:
    return {v.lower(): VARIABLES[v].get_default(call_default_factory=True) for v in variables}


def describe(exc: ValidationError) -> str:
    """A validation error as one sentence naming the variable (a field's loc ends in it)."""
    return _sentence(exc.errors()[0])


def _sentence(error: ErrorDetails) -> str:
    # The input is deliberately not repeated: it may be a secret put in the wrong variable.
    return f"{_variable(error)} is invalid ({_reason(error['msg'])}); fix or unset it."


def _variable(error: ErrorDetails) -> str:
    loc = error["loc"]
    named = [str(part).upper() for part in loc if str(part).upper() in PLACES]
    return named[0] if named else (str(loc[0]).upper() if loc else "a setting")


def _reason(message: str) -> str:
    """pydantic's message as the middle of our sentence: its "Value error, " prefix dropped
    and only its first letter lowered (the rest may quote a command to paste)."""
    text = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return text[:1].lower() + text[1:]
