"""`doctor`'s look at the settings: every problem at once, and which checks they stop.

The settings were read leniently (`gateway.config.settings.load_settings_leniently`): a
malformed value is a problem here and its default there, so `doctor` still checks
everything that does not depend on it, and skips, with the reason, what does
(`DEPENDS_ON`: read as its default, the check would try something the operator did not
set). Each check of what `serve` requires runs on its own (`Settings.serve_checks`), so a
missing value does not hide a malformed one, and with THREADGATE_ROUTES no
THREADGATE_MODEL is asked for. The variables no setting reads are warnings, each with the
closest name that is one (gateway/config/environment.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent import ConfigError
from gateway.config.environment import UnknownVariable
from gateway.config.settings import Settings
from gateway.operator.reports import Finding


@dataclass(frozen=True, slots=True)
class Given:
    """What was found while the settings were read, before any check: the malformed values
    (each read as its default, so the other checks still run) and the variables no
    setting reads."""

    malformed: Sequence[ConfigError] = ()
    unknown: Sequence[UnknownVariable] = ()

    def blocking(self, check: str) -> str | None:
        """The first malformed variable `check` depends on (`DEPENDS_ON`), if any."""
        names = [_named(problem) for problem in self.malformed]
        prefixes = DEPENDS_ON.get(check, ())
        return next((name for name in names if name.startswith(prefixes)), None)


# The variables each check depends on, by name or prefix.
DEPENDS_ON = {
    "slack": ("SLACK_", "DATABASE_URL", "THREADGATE_TOKEN_KEY"),
    "socket mode": ("SLACK_",),
    "model": (
        "THREADGATE_MODEL",
        "THREADGATE_FALLBACK_MODEL",
        "THREADGATE_ROUTES",
        "THREADGATE_GATEWAY_",
        "OPENAI_",
        "ANTHROPIC_",
    ),
    "database": ("DATABASE_URL", "THREADGATE_DATA_DIR", "THREADGATE_DB_CONNECTIONS"),
    "erasure": ("DATABASE_URL", "THREADGATE_DATA_DIR"),
    "mcp": ("THREADGATE_MCP_CONFIG",),
}


def check_settings(settings: Settings, given: Given = Given()) -> list[Finding]:
    """Every malformed or missing setting (each on its line, none hiding another), then
    the variables no setting reads, each with the closest name that is one."""
    problems = [*given.malformed, *config_problems(settings, given.malformed)]
    findings = [Finding("settings", "FAIL", str(problem)) for problem in problems]
    if not findings:
        findings.append(Finding("settings", "ok", f"complete for {mode(settings)}"))
    return [*findings, *(Finding("settings", "warn", str(u)) for u in given.unknown)]


def mode(settings: Settings) -> str:
    transport = (
        "Socket Mode (SLACK_APP_TOKEN is set)" if settings.slack.socket_mode else "HTTP mode"
    )
    if not settings.process.serves_events:
        transport = "no Slack events"
    described = f"{transport}, many workspaces (OAuth)" if settings.slack.oauth_mode else transport
    role = settings.process.role
    return described if role == "all" else f"role {role} (THREADGATE_ROLE): {described}"


def config_problems(settings: Settings, malformed: Sequence[ConfigError] = ()) -> list[ConfigError]:
    """Every setting the mode requires that is missing or wrong, each once (not the
    first only): a variable already reported as `malformed` (now its default) is not
    reported again as missing."""
    named = {_named(problem) for problem in malformed}
    found = [problem for check in settings.serve_checks() if (problem := config_error(check))]
    return [problem for problem in found if _named(problem) not in named]


def _named(problem: ConfigError) -> str:
    """The variable a ConfigError names first (its sentence starts with it)."""
    return str(problem).split(" ", 1)[0]


def config_error(check: Callable[[], object]) -> ConfigError | None:
    try:
        check()
    except ConfigError as exc:
        return exc
    return None
