"""The channel config file (`THREADGATE_CHANNEL_CONFIG`): each channel its own boundary.

One deployment serves channels that need different answers — the support desk and the ops
channel, an internal channel and one shared with a customer. The file says, per channel
id, what differs from a `default` that applies everywhere else::

    {
      "default": {"instructions": "Answer in English.", "tools": ["*"],
                  "externalChannels": "refuse"},
      "channels": {
        "C0123ABCD": {"instructions": "You are the support desk.",
                      "model": "openai:gpt-4.1", "tools": ["orders__*"],
                      "limits": {"userMessagesPerHour": 20}}
      }
    }

Keys of an entry (all optional; a channel's entry overrides the default's key by key, and
`limits` limit by limit):

- `tools`: names or globs (`fnmatch`, case-sensitive) of the work tools offered, built-in
  (`current_time`, `read_thread`) and MCP ones (`server__tool`); absent: all of them.
  A tool not matched is not in the request's tools, and a call to it is refused. Control
  tools are always offered, and subtasks get the channel's tools.
- `instructions`: added to the system prompt after THREADGATE_INSTRUCTIONS; a change starts
  a new prompt epoch (new threads get it, ongoing ones keep theirs).
- `model`, `fallbackModel`: `provider:model`, in place of the first route of the
  deployment's fallback chain (THREADGATE_MODEL, or THREADGATE_ROUTES' first) and of the
  routes after it (`"fallbackModel": null`: no fallback in that channel). A spec reaches
  its model by the deployment's route of that spec, else by the first route of its
  provider (its base URL and key), else by the vendor's settings.
- `externalChannels`: `refuse` (the default) or `allow` a channel shared with another
  organization (Slack Connect).
- `limits`: `userMessagesPerHour`, `threadMessagesPerHour`, `userDailyTokens`,
  `channelDailyTokens`, `modelRequestsPerMessage` — the THREADGATE_ settings of the same
  meaning, for that channel (0: none).
- `channelContextMessages`: the channel's recent messages a top-level mention there
  carries (0 to 100; 0: none), in place of THREADGATE_CHANNEL_CONTEXT_MESSAGES.
- `threadQueue`: `collect`, `steer`, `followup` or `interrupt`, in place of
  THREADGATE_THREAD_QUEUE: how its threads' messages that arrive while a task works are
  answered (storage/thread_queue.py).

Unknown keys are refused rather than ignored, as in the MCP config: a misspelt `tools`
would otherwise offer every tool. A bad file is a `ConfigError` of one sentence naming the
variable, the file and the field; never a value (instructions may be confidential).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from agent import ConfigError, ThreadQueueMode, parse_spec, read_json_file

VARIABLE = "THREADGATE_CHANNEL_CONFIG"

External = Literal["refuse", "allow"]
# Slack conversation ids: public and private channels (C), older private ones (G), DMs (D).
ChannelId = Annotated[str, StringConstraints(pattern=r"^[CGD][A-Z0-9]{2,31}$")]
ToolGlob = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Count = Annotated[int, Field(ge=0)]
ContextCount = Annotated[int, Field(ge=0, le=100)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ChannelLimits(_Strict):
    """Limits of one channel, each in place of its deployment setting (None: that one)."""

    user_messages_per_hour: Count | None = Field(default=None, alias="userMessagesPerHour")
    thread_messages_per_hour: Count | None = Field(default=None, alias="threadMessagesPerHour")
    user_daily_tokens: Count | None = Field(default=None, alias="userDailyTokens")
    channel_daily_tokens: Count | None = Field(default=None, alias="channelDailyTokens")
    model_requests_per_message: Count | None = Field(default=None, alias="modelRequestsPerMessage")

    def over(self, base: ChannelLimits) -> ChannelLimits:
        """These limits, with `base`'s where these have none."""
        return base.model_copy(update=self.model_dump(exclude_none=True))


NO_LIMITS = ChannelLimits()


class ChannelEntry(_Strict):
    """What one channel (or the default) says; a key not given is inherited."""

    instructions: Annotated[str, Field(max_length=20_000)] | None = None
    model: str | None = None
    fallback_model: str | None = Field(default=None, alias="fallbackModel")
    tools: tuple[ToolGlob, ...] | None = None
    external_channels: External | None = Field(default=None, alias="externalChannels")
    limits: ChannelLimits = NO_LIMITS
    context_messages: ContextCount | None = Field(default=None, alias="channelContextMessages")
    thread_queue: ThreadQueueMode | None = Field(default=None, alias="threadQueue")

    def over(self, base: ChannelEntry) -> ChannelEntry:
        """This entry with `base`'s keys where it gives none (a `fallbackModel` given as
        null is given: no fallback)."""
        given = {name: getattr(self, name) for name in self.model_fields_set}
        given["limits"] = self.limits.over(base.limits)
        return base.model_copy(update=given)


NO_ENTRY = ChannelEntry()


class _File(_Strict):
    default: ChannelEntry = NO_ENTRY
    channels: dict[ChannelId, ChannelEntry] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Effective:
    """A channel's policy, every key decided (against the deployment's models)."""

    instructions: str = ""
    models: tuple[str, ...] | None = None  # the ladder's specs; None: the deployment's own
    tools: tuple[str, ...] = ("*",)
    external: External = "refuse"
    limits: ChannelLimits = NO_LIMITS
    context_messages: int | None = None  # None: THREADGATE_CHANNEL_CONTEXT_MESSAGES
    thread_queue: ThreadQueueMode | None = None  # None: THREADGATE_THREAD_QUEUE


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    """The file, parsed: the default entry and each channel's."""

    default: ChannelEntry = NO_ENTRY
    channels: Mapping[str, ChannelEntry] = field(default_factory=dict)
    source: str = ""  # the file it was read from, for messages

    def effective(self, channel: str | None, deployment: tuple[str, ...]) -> Effective:
        """The policy of `channel` (None: the default), given the deployment's model specs
        (its routes' `provider:model`, in order)."""
        entry = self.default
        if channel is not None and channel in self.channels:
            entry = self.channels[channel].over(self.default)
        return Effective(
            instructions=entry.instructions or "",
            models=_models(entry, deployment),
            tools=entry.tools if entry.tools is not None else ("*",),
            external=entry.external_channels or "refuse",
            limits=entry.limits,
            context_messages=entry.context_messages,
            thread_queue=entry.thread_queue,
        )


EMPTY = ChannelConfig()


def _models(entry: ChannelEntry, deployment: tuple[str, ...]) -> tuple[str, ...] | None:
    """The specs of the entry's ladder, or None when it names no model of its own."""
    if entry.model is None and "fallback_model" not in entry.model_fields_set:
        return None
    primary = entry.model or (deployment[0] if deployment else None)
    if primary is None:
        return None
    rest: tuple[str, ...]
    if "fallback_model" in entry.model_fields_set:
        rest = (entry.fallback_model,) if entry.fallback_model else ()
    else:
        rest = tuple(deployment[1:])  # the deployment's fallbacks, all of them
    return (primary, *rest)


def load_channel_config(path: Path) -> ChannelConfig:
    """The config in `path`; a `ConfigError` naming the variable, the file and the field
    at fault otherwise."""
    raw = read_json_file(path, variable=VARIABLE, what="a channel config file")
    return parse_channel_config(raw, source=str(path))


def parse_channel_config(raw: Any, *, source: str = "") -> ChannelConfig:
    """`raw` (the parsed JSON) as a `ChannelConfig`; see `load_channel_config`."""
    where = f"{VARIABLE} ({source})" if source else VARIABLE
    if not isinstance(raw, dict):
        raise ConfigError(
            f'{where} must be a JSON object with "default" and "channels": fix the file.'
        )
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_problem(exc)}; fix the file.") from None
    entries = {
        "default": parsed.default,
        **{f"channels.{c}": e for c, e in parsed.channels.items()},
    }
    for name, entry in entries.items():
        for key, spec in (("model", entry.model), ("fallbackModel", entry.fallback_model)):
            if spec is not None:
                parse_spec(spec, variable=f"{where}: field {name}.{key}")
    return ChannelConfig(parsed.default, dict(parsed.channels), source)


def _problem(exc: ValidationError) -> str:
    """The first problem as `field F: what`, without the input (it may be confidential)."""
    first = exc.errors()[0]
    loc = [str(part) for part in first["loc"]]
    if loc[-1:] == ["[key]"]:  # a key of `channels` that is no channel id
        return f"field {'.'.join(loc[:-1])}: not a Slack conversation id (such as C0123ABCD)"
    message = str(first["msg"]).removeprefix("Value error, ").lower()
    return f"field {'.'.join(loc)}: {message}" if loc else message
