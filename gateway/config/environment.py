"""The process environment around `Settings`: the names nobody reads, and the ones slack-bolt
would read behind the settings' back.

A misspelled variable is not an error anywhere: `THREADGATE_ALLOWED_CHANNEL=C0123ABCD` (the
S missing) is simply not read, and the bot answers every channel. So every `THREADGATE_…`
and `SLACK_…` name in the environment or the `.env` file that no setting declares is
reported, with the closest name that is one (`unknown_variables`): at `serve` as a
warning in the log, in `doctor` as a line of its report. Not reported: the names slack-bolt
and slack-sdk read themselves (`FOREIGN`), the Slack CLI's (`SLACK_CLI_…`), and any name a
route or the MCP config reads as `${NAME}`.

slack-bolt reads `SLACK_BOT_TOKEN`, `SLACK_SIGNING_SECRET`, `SLACK_CLIENT_ID` and
`SLACK_CLIENT_SECRET` from the process environment on its own when an app is built, and
then warns that the token it found "will be ignored" beside the client and `authorize` we
give it (or, with the client id and secret, sets up file-based OAuth stores we do not use,
and says so). The gateway gives bolt everything explicitly, so `serve` hands those variables
over once the settings hold them (`hand_over`): bolt builds the app from its arguments
alone, and the child processes `serve` starts (the file decoders, which read what
strangers upload) do not inherit the Slack credentials either.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from pydantic_settings import DotEnvSettingsSource

from gateway.config.settings import PLACES, Settings

# Families whose unknown members are reported.
FAMILIES = ("THREADGATE_", "SLACK_")
# Read by slack-bolt or slack-sdk themselves (their OAuth defaults, the legacy token
# names their samples use), or set by the Slack CLI for `slack run`: never reported.
FOREIGN = frozenset(
    {
        "SLACK_API_TOKEN",
        "SLACK_APP_PATH",
        "SLACK_INSTALL_PATH",
        "SLACK_REDIRECT_URI",
        "SLACK_REDIRECT_URI_PATH",
        "SLACK_SCOPES",
        "SLACK_USER_SCOPES",
        "SLACK_VERIFICATION_TOKEN",
    }
)
FOREIGN_PREFIXES = ("SLACK_CLI_",)
# What slack-bolt reads from the environment when an app is built (module docstring).
BOLT_READS = ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET")
# How alike two names' endings must be (difflib's ratio) for one to be offered for the other.
_CLOSE = 0.75
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True, slots=True)
class UnknownVariable:
    """A variable no setting reads, where it was found, and the known name closest to it."""

    name: str
    source: str  # "the environment" or the `.env` file's path
    closest: str | None

    def __str__(self) -> str:
        advice = f": did you mean {self.closest}?" if self.closest else ": remove it"
        return f"{self.name} (in {self.source}) is not a setting threadgate reads{advice}"


def unknown_variables(
    settings: Settings, environ: Mapping[str, str], env_file: Path | str | None
) -> list[UnknownVariable]:
    """Every unknown `THREADGATE_…`/`SLACK_…` name in `environ` and in `env_file` (if it
    exists), each once, in the order found."""
    known = frozenset(PLACES) | FOREIGN | referenced(settings)
    sources: list[tuple[str, Iterable[str]]] = [("the environment", environ)]
    if env_file is not None and Path(env_file).is_file():
        sources.append((str(env_file), _dotenv_names(env_file)))
    found: dict[str, UnknownVariable] = {}
    for source, names in sources:
        for name in (n.upper() for n in names):
            if name.startswith(FAMILIES) and not _known(name, known) and name not in found:
                found[name] = UnknownVariable(name, source, closest(name))
    return list(found.values())


def closest(name: str) -> str | None:
    """The declared variable most like `name`, compared without the family prefix (so
    `THREADGATE_BOT_TOKEN` finds SLACK_BOT_TOKEN), or None when none is close."""
    stem = _stem(name)
    stems = {_stem(variable): variable for variable in sorted(PLACES)}
    match = difflib.get_close_matches(stem, stems, n=1, cutoff=_CLOSE)
    return stems[match[0]] if match else None


def referenced(settings: Settings) -> frozenset[str]:
    """The names THREADGATE_ROUTES and the MCP config read as `${NAME}`: the operator's
    own variables, whatever they are called."""
    chain = settings.models.chain.strip()
    files = [settings.tools.mcp_file, Path(chain) if chain[:1] not in ("", "[") else None]
    texts = [chain, *(_read(path) for path in files if path is not None)]
    return frozenset(name.upper() for text in texts for name in _REFERENCE.findall(text))


def hand_over(environ: MutableMapping[str, str]) -> None:
    """Take the variables slack-bolt would read by itself out of `environ` (module
    docstring); call once the settings are read."""
    for name in BOLT_READS:
        environ.pop(name, None)


def _known(name: str, known: frozenset[str]) -> bool:
    return name in known or name.startswith(FOREIGN_PREFIXES)


def _stem(name: str) -> str:
    for family in FAMILIES:
        if name.startswith(family):
            return name.removeprefix(family)
    return name


def _dotenv_names(env_file: Path | str) -> list[str]:
    """The names the `.env` file sets, read as the settings read it."""
    return list(DotEnvSettingsSource(Settings, env_file=env_file).env_vars)


def _read(path: Path) -> str:
    try:
        return path.expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeError):
        return ""  # a file that cannot be read is its own setting's problem
