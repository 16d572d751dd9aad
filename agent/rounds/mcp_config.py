"""The MCP config file (`THREADGATE_MCP_CONFIG`): which servers to connect, and how.

It is the `mcpServers` JSON shape other MCP clients read, so a team can reuse the file
it has, plus a few keys of ours::

    {
      "mcpServers": {
        "github": {
          "url": "https://api.githubcopilot.com/mcp/",
          "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
          "allowedTools": ["search_issues", "get_issue"],
          "timeoutSeconds": 20,
          "maxOutputChars": 8000,
          "requireApproval": ["create_issue"]
        },
        "docs": {"command": "docs-mcp", "args": ["--root", "/srv/docs"], "env": {}}
      },
      "subtasks": {"agent": {"servers": ["github"]}}
    }

A server with `command` runs over stdio (`args`, `env`, `cwd`); one with `url` speaks
Streamable HTTP (`headers`). `type` may say which (`stdio`, `http`, `streamable-http`).
`allowedTools` lists the server's tools the model may call (absent: all of them);
`timeoutSeconds` and `maxOutputChars` override the round's limits for its tools;
`"disabled": true` skips it. `requireApproval` makes calls wait for a person's approval
before they run (agent/core/approval.py): `true` for every tool of the server, or a list of
its tool names (each must be one `allowedTools` allows, when that is given); such tools are
never given to a sub-agent. `subtasks` names, per subtask type, the servers whose tools
that type's sub-agent gets; a type not named gets none (a task's own rounds get every
server's allowed tools).

`${VAR}` (or `${VAR:-default}`) in `command`, `args`, `env`, `cwd`, `url` and `headers`
is replaced with the variable's value from the environment handed in, so secrets stay out
of the file. Those values, and every header and env value, are the server's `secrets`:
the gateway adds them to what its log redacts, and they are never repeated in an error
(a `ConfigError` names the server and the field, never the value).

Unknown keys are refused rather than ignored: a misspelt `allowedTools` would otherwise
silently offer every tool of the server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, model_validator

from agent.core.config_files import read_json_file
from agent.core.errors import ConfigError

VARIABLE = "THREADGATE_MCP_CONFIG"

# Server names become tool-name prefixes (`server__tool`, providers allow
# ^[a-zA-Z0-9_-]{1,64}$); "__" is the separator, so a name may not hold one.
_SERVER_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_)){0,31}")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class McpServerConfig(_Strict):
    """One server: how to reach it, which of its tools to offer, and its limits."""

    name: str = ""  # filled in from the key of `mcpServers`
    type: Literal["stdio", "http", "streamable-http", "streamableHttp"] | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    allowed_tools: tuple[str, ...] | None = Field(default=None, alias="allowedTools")
    timeout_seconds: Annotated[float, Field(gt=0, le=3600)] | None = Field(
        default=None, alias="timeoutSeconds"
    )
    max_output_chars: Annotated[int, Field(ge=100, le=1_000_000)] | None = Field(
        default=None, alias="maxOutputChars"
    )
    disabled: bool = False
    require_approval: StrictBool | tuple[str, ...] = Field(default=False, alias="requireApproval")
    # The values `${VAR}` expanded to, and every header and env value: never shown.
    secrets: tuple[str, ...] = Field(default=(), exclude=True)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a stdio server) or url (a Streamable HTTP one)")
        if self.type == "stdio" and self.command is None:
            raise ValueError('type "stdio" needs a command')
        if self.type not in (None, "stdio") and self.url is None:
            raise ValueError(f'type "{self.type}" needs a url')
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        if isinstance(self.require_approval, tuple) and self.allowed_tools is not None:
            unknown = [t for t in self.require_approval if t not in self.allowed_tools]
            if unknown:
                raise ValueError(
                    f"requireApproval names {', '.join(unknown)}, which allowedTools does not allow"
                )
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    def allows(self, tool: str) -> bool:
        return self.allowed_tools is None or tool in self.allowed_tools

    def needs_approval(self, tool: str) -> bool:
        """Whether a call of the server's `tool` waits for a person before it runs."""
        if isinstance(self.require_approval, bool):
            return self.require_approval
        return tool in self.require_approval


class SubtaskServers(_Strict):
    servers: tuple[str, ...] = ()


class McpConfig(_Strict):
    """The whole file: servers by name, and which servers each subtask type gets."""

    servers: dict[str, McpServerConfig] = Field(default_factory=dict, alias="mcpServers")
    subtasks: dict[str, SubtaskServers] = Field(default_factory=dict)

    @property
    def enabled(self) -> list[McpServerConfig]:
        return [server for server in self.servers.values() if not server.disabled]

    def subtask_types_of(self, server: str) -> frozenset[str]:
        """The subtask types whose sub-agents get `server`'s tools."""
        return frozenset(kind for kind, given in self.subtasks.items() if server in given.servers)

    def secrets(self) -> list[str]:
        return [secret for server in self.servers.values() for secret in server.secrets]


EMPTY = McpConfig()


def load_mcp_config(path: Path, environ: Mapping[str, str]) -> McpConfig:
    """The config in `path`, with `${VAR}` taken from `environ`; a `ConfigError` naming
    `THREADGATE_MCP_CONFIG` and the server and field at fault otherwise."""
    raw = read_json_file(path, variable=VARIABLE, what="an MCP config file")
    return parse_mcp_config(raw, environ, source=str(path))


def parse_mcp_config(raw: Any, environ: Mapping[str, str], *, source: str = "") -> McpConfig:
    """`raw` (the parsed JSON) as an `McpConfig`; see `load_mcp_config`."""
    where = f"{VARIABLE} ({source})" if source else VARIABLE
    if not isinstance(raw, dict) or not isinstance(raw.get("mcpServers", {}), dict):
        raise ConfigError(
            f'{where} must be a JSON object with an "mcpServers" object: fix the file.'
        )
    servers = {
        name: _server(where, name, entry, environ)
        for name, entry in raw.get("mcpServers", {}).items()
    }
    try:
        config = McpConfig.model_validate({**raw, "mcpServers": servers})
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_problem(exc)}; fix the file.") from None
    for kind, given in config.subtasks.items():
        unknown = [name for name in given.servers if name not in config.servers]
        if unknown:
            raise ConfigError(
                f'{where}: subtasks "{kind}" names server(s) {", ".join(unknown)} that are not '
                "in mcpServers; fix the file."
            )
    return config


def _server(where: str, name: str, entry: Any, environ: Mapping[str, str]) -> McpServerConfig:
    if not _SERVER_NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: server name {name!r} must be 1-32 letters, digits, '-' or single '_' "
            "(it prefixes the server's tool names); fix the file."
        )
    if not isinstance(entry, dict):
        raise ConfigError(f'{where}: server "{name}" must be a JSON object; fix the file.')
    secrets: list[str] = []
    expanded = dict(entry)
    for field in ("command", "args", "env", "cwd", "url", "headers"):
        if field in entry:
            expanded[field] = _expand(
                entry[field], environ, secrets, f'server "{name}" {field}', where
            )
    for field in ("env", "headers"):
        if isinstance(expanded.get(field), dict):
            secrets += [v for v in expanded[field].values() if isinstance(v, str)]
    try:
        return McpServerConfig.model_validate(
            {**expanded, "name": name, "secrets": tuple(s for s in dict.fromkeys(secrets) if s)}
        )
    except ValidationError as exc:
        raise ConfigError(f'{where}: server "{name}" {_problem(exc)}; fix the file.') from None


def _expand(
    value: Any, environ: Mapping[str, str], secrets: list[str], what: str, where: str
) -> Any:
    """`value` with every `${VAR}` inside its strings replaced; what was put in is noted."""
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            variable, default = match.group(1), match.group(2)
            found = environ.get(variable)
            if found is None and default is None:
                raise ConfigError(
                    f"{where}: {what} uses ${{{variable}}}, which is not set in the "
                    "environment; set it, or give a default as ${VAR:-default}."
                )
            result = found if found is not None else default or ""
            secrets.append(result)
            return result

        return _REFERENCE.sub(substitute, value)
    if isinstance(value, list):
        return [_expand(item, environ, secrets, what, where) for item in value]
    if isinstance(value, dict):
        return {k: _expand(v, environ, secrets, f"{what}.{k}", where) for k, v in value.items()}
    return value


def _problem(exc: ValidationError) -> str:
    """The first problem as `field: what`, without the input (it may be a secret)."""
    first = exc.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    field = ".".join(str(part) for part in first["loc"])
    return f"field {field}: {message.lower()}" if field else message
