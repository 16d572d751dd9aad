"""Reading a configuration file a setting names: one reader, one pair of messages.

The MCP servers (THREADGATE_MCP_CONFIG) and the channel policies (THREADGATE_CHANNEL_CONFIG)
are JSON files an operator writes; both are read at start-up and again on SIGHUP. A file
that cannot be read, or is not JSON, must end in the same one sentence either way: which
variable names it, what is wrong, what to do. Here, in agent/ (the lowest package that
reads one), so the gateway's configuration reads its files the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.core.errors import ConfigError


def read_json_file(path: Path, *, variable: str, what: str) -> object:
    """The JSON in `path`, which `variable` names (`what`: "a channel config file"); a
    `ConfigError` naming the variable, the file and the fix otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(
            f"{variable} names {path}, which cannot be read ({reason}): put the path of "
            f"{what} there, or unset it."
        ) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"{variable} ({path}) is not valid JSON (line {getattr(exc, 'lineno', '?')}): fix "
            "the file."
        ) from None
