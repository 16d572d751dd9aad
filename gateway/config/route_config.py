"""The fallback chain as a list of routes (`THREADGATE_ROUTES`), read strictly.

Each route is the provider and model, where it is reached and with which key, so two
routes of one vendor can use two accounts, or one the vendor and one a gateway::

    [
      {"model": "anthropic:claude-sonnet-4-5", "apiKey": "${ANTHROPIC_API_KEY}"},
      {"model": "openai:gpt-4.1-mini", "baseUrl": "https://gateway.example/openai/v1",
       "apiKey": "${GATEWAY_OPENAI_KEY}", "capabilities": {"documents": false},
       "temperature": 0.2}
    ]

Keys of a route: `model` (`provider:model`, required); `baseUrl` (absent: the vendor's own
API, and then the vendor's usual key when `apiKey` is absent too — a route to any other
URL never gets that key), https, or plain http to a loopback address only, the rule of
SLACK_API_URL (`carries_tokens_safely`): a key, and what people wrote, must not cross a
network in the clear; `apiKey`, the *name* of the environment variable holding the
key, written `${NAME}`: the setting itself never holds a secret, so it can be logged,
diffed and stored like any other. It may not name one of the gateway's own secrets
(`GATEWAY_SECRETS`: Slack's tokens and secrets, the database URL, the token key…): a
route would hand them to whatever its URL is; `capabilities` (`vision`, `documents`,
`parallelToolCalls`, `structuredOutput`, `sampling`: true or false, over the model's
defaults, agent/models/capabilities.py); `temperature`, `topP`, `stop` (at most four
sequences) over THREADGATE_TEMPERATURE, THREADGATE_TOP_P and THREADGATE_STOP_SEQUENCES;
`providerOptions`, a JSON object merged into every request body of the route as it is
(`{"reasoning_effort": "low"}`, OpenRouter's `{"reasoning": {"max_tokens": 2048}}`): the
escape hatch for what the vendor takes and we do not model. A key the gateway sets itself
(`RESERVED_OPTIONS`: the model, the messages, the tools, streaming, the output limit,
sampling and the like) is refused: an option overriding it would silently undo what the
gateway decided, a tool offer, an output bound or the stream it reads. So is Anthropic's
extended thinking (`thinking` enabled on an `anthropic` route): Anthropic refuses it beside
a forced tool call, which every round makes, so each request would fail over to the next
route.

The value is the JSON itself, or the path of a file holding it. Unknown keys are refused
rather than ignored (a misspelt `baseUrl` would send a key to the vendor instead). A bad
value is a `ConfigError` of one sentence naming the variable and the route's index; a
key's value never appears in one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints, ValidationError

from agent import CAPABILITY_NAMES, ConfigError, RouteConfig, Sampling, parse_spec
from gateway.config.groups import inline_or_file
from gateway.slack.client import carries_tokens_safely

VARIABLE = "THREADGATE_ROUTES"
MAX_ROUTES = 8
MAX_STOP_SEQUENCES = 4  # OpenAI's bound; Anthropic takes more, but one list serves both
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]{0,127})\}")
_URL = re.compile(r"https?://[^\s/?#]+[^\s]*", re.IGNORECASE)
_CAMEL = {"parallelToolCalls": "parallel_tool_calls", "structuredOutput": "structured_output"}
# The variables the gateway itself reads as secrets, which no route may send to a model:
# every secret setting but the model path's own (OPENAI_API_KEY, ANTHROPIC_API_KEY,
# THREADGATE_GATEWAY_TOKEN: what routes are for; a test compares this with the settings),
# and those read by the libraries in the process (asyncpg's PGPASSWORD, the OpenTelemetry
# exporter's headers). Any SLACK_* is Slack's, never a model's.
GATEWAY_SECRETS = frozenset(
    {
        "SLACK_BOT_TOKEN",
        "SLACK_SIGNING_SECRET",
        "SLACK_APP_TOKEN",
        "SLACK_CLIENT_SECRET",
        "DATABASE_URL",
        "THREADGATE_TOKEN_KEY",
        "THREADGATE_ALERT_WEBHOOK_URL",
        "PGPASSWORD",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    }
)
# Body fields either wire format sets itself (agent/models/providers/*_wire.py), and what
# to use instead where the route has a key for it.
RESERVED_OPTIONS: Mapping[str, str] = {
    "model": "the route's model",
    "messages": "",
    "system": "",
    "tools": "",
    "tool_choice": "",
    "parallel_tool_calls": "the route's capabilities.parallelToolCalls",
    "stream": "",
    "stream_options": "",
    "response_format": "",
    "output_format": "",
    "user": "",
    "metadata": "",
    "prompt_cache_key": "",
    "max_tokens": "THREADGATE_MAX_OUTPUT_TOKENS",
    "max_completion_tokens": "THREADGATE_MAX_OUTPUT_TOKENS",
    "temperature": "the route's temperature",
    "top_p": "the route's topP",
    "stop": "the route's stop",
    "stop_sequences": "the route's stop",
}

StopSequence = Annotated[str, StringConstraints(min_length=1, max_length=200)]
StopSequences = Annotated[tuple[StopSequence, ...], Field(max_length=MAX_STOP_SEQUENCES)]


class _Route(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    model: Annotated[str, StringConstraints(min_length=3, max_length=300)]
    base_url: str | None = Field(default=None, alias="baseUrl")
    api_key: str | None = Field(default=None, alias="apiKey")
    capabilities: dict[str, bool] = Field(default_factory=dict)
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = Field(default=None, alias="topP")
    stop: StopSequences | None = None
    provider_options: dict[str, Any] | None = Field(default=None, alias="providerOptions")


def routes_json(value: str) -> str:
    """THREADGATE_ROUTES's JSON: the value itself when it is a list, else the file it
    names; a `ValueError` (said of the setting) when the file cannot be read."""
    return inline_or_file(value, opens="[")


def parse_routes(
    text: str, environ: Mapping[str, str] | None, *, known: Collection[str]
) -> tuple[RouteConfig, ...]:
    """The routes `text` lists, their keys read from `environ` (None: not read, the
    routes carry none); `known` are the provider names a route may use."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", "?")
        raise ConfigError(f"{VARIABLE} is not valid JSON (line {line}): fix it.") from None
    if not isinstance(raw, list) or not raw or len(raw) > MAX_ROUTES:
        raise ConfigError(
            f"{VARIABLE} must be a JSON list of 1 to {MAX_ROUTES} routes, such as "
            '[{"model": "openai:gpt-4.1-mini"}]: fix it.'
        )
    return tuple(_route(n, item, environ, known) for n, item in enumerate(raw))


def _route(
    n: int, raw: Any, environ: Mapping[str, str] | None, known: Collection[str]
) -> RouteConfig:
    where = f"{VARIABLE}[{n}]"
    try:
        entry = _Route.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_problem(exc)}; fix it.") from None
    provider, model = parse_spec(entry.model, variable=f"{where}.model", known=known)
    if entry.base_url is not None and not _URL.fullmatch(entry.base_url):
        raise ConfigError(f"{where}.baseUrl must be an http:// or https:// URL: fix it.")
    if entry.base_url is not None and not carries_tokens_safely(entry.base_url):
        raise ConfigError(
            f"{where}.baseUrl must be https://, or plain http:// to a loopback address such "
            "as http://127.0.0.1:11434/v1 (what people write is sent there): fix it."
        )
    credential, key = _key(entry.api_key, environ, where)
    return RouteConfig(
        provider,
        model,
        entry.base_url,
        key,
        credential,
        _capabilities(entry.capabilities, where),
        Sampling(
            entry.temperature,
            entry.top_p,
            tuple(entry.stop or ()),
            _provider_options(provider, entry.provider_options or {}, where),
        ),
    )


def _key(
    reference: str | None, environ: Mapping[str, str] | None, where: str
) -> tuple[str, SecretStr | None]:
    """The variable `apiKey` names and its value (None without `environ`); never the
    value in an error."""
    if reference is None:
        return "", None
    found = _REFERENCE.fullmatch(reference.strip())
    if found is None:
        raise ConfigError(
            f"{where}.apiKey must name the environment variable holding the key, as "
            "${NAME}, not hold a key: put the key in a variable of its own."
        )
    name = found[1]
    if name in GATEWAY_SECRETS or name.upper().startswith("SLACK_"):
        raise ConfigError(
            f"{where}.apiKey names {name}, a secret of the gateway itself, which no route "
            "may send to a model: name the variable holding that route's API key."
        )
    if environ is None:
        return name, None
    value = environ.get(name, "")
    if not value:
        raise ConfigError(
            f"{where}.apiKey names {name}, which is not set: put that route's API key there."
        )
    return name, SecretStr(value)


def _capabilities(given: Mapping[str, bool], where: str) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for key, value in given.items():
        name = _CAMEL.get(key, key)
        if name not in CAPABILITY_NAMES:
            known = ", ".join(sorted({"vision", "documents", "sampling", *_CAMEL}))
            raise ConfigError(f"{where}.capabilities has an unknown key {key!r}: use {known}.")
        out[name] = value
    return out


def _provider_options(provider: str, given: dict[str, Any], where: str) -> dict[str, Any]:
    """`providerOptions`, refused when a key is one the gateway sets itself, or turns on
    Anthropic's extended thinking (the module docstring says why)."""
    for key in given:
        if key in RESERVED_OPTIONS:
            instead = RESERVED_OPTIONS[key]
            use = f"set it with {instead}" if instead else "leave it to the gateway"
            raise ConfigError(
                f"{where}.providerOptions sets {key!r}, which the gateway sets itself: "
                f"remove it and {use}."
            )
    thinking = given.get("thinking")
    if provider == "anthropic" and thinking not in (None, {"type": "disabled"}):
        raise ConfigError(
            f"{where}.providerOptions enables Anthropic's extended thinking, which Anthropic "
            "refuses beside the tool call every round requires: remove `thinking`."
        )
    return given


def parse_stop_sequences(value: str) -> tuple[str, ...]:
    """THREADGATE_STOP_SEQUENCES: a JSON list of at most four strings; "" is none."""
    if not value.strip():
        return ()
    try:
        raw = json.loads(value)
    except ValueError:
        raise ValueError('expected a JSON list of strings, such as ["\\n\\nUser:"]') from None
    if not isinstance(raw, list) or not all(isinstance(s, str) and s for s in raw):
        raise ValueError("expected a JSON list of non-empty strings")
    if len(raw) > MAX_STOP_SEQUENCES:
        raise ValueError(f"expected at most {MAX_STOP_SEQUENCES} stop sequences")
    return tuple(raw)


def _problem(exc: ValidationError) -> str:
    """The first problem as `field F: what`, without the input (it may be a key)."""
    first = exc.errors()[0]
    loc = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ").lower()
    return f"field {loc}: {message}" if loc else message
