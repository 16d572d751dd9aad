"""The `threadgate` command line.

Each subcommand reads the settings once, and any `ConfigError` or unreachable database
ends the command with one sentence on stderr and a non-zero status — never a traceback.

Each subcommand imports what it runs when it runs: `manifest`, `migrate`, `tasks`,
`sessions`, `feedback` and `usage` answer without loading the Slack app, the HTTP server
and the task runner (`gateway.process.service`), which take most of a start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import functools
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence

from agent import ConfigError
from gateway.config.environment import hand_over, unknown_variables
from gateway.config.settings import (
    ROLES,
    Settings,
    database_dsn,
    load_settings,
    load_settings_leniently,
)
from gateway.operator.feedback_report import add_feedback_parser
from gateway.operator.schedule_commands import add_schedules_parser
from gateway.operator.task_commands import add_sessions_parser, add_tasks_parser
from gateway.operator.usage_report import add_usage_parser
from gateway.process.event_loop import loop_factory
from gateway.slack.manifest import events_url, render_manifest
from gateway.telemetry.logs import configure_logging
from storage import Database, StorageError

log = logging.getLogger("threadgate")

# The `.env` of the working directory, as documented; only the command line reads one.
ENV_FILE = ".env"


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = load(args)
        configure_logging(
            settings.telemetry.log_level,
            settings.telemetry.log_format,
            secrets=settings.secret_values(),
        )
        with asyncio.Runner(loop_factory=loop_factory(settings.process.event_loop)) as run:
            return int(run.run(args.command(settings, args)) or 0)
    except ConfigError as exc:
        print(f"threadgate: {exc}", file=sys.stderr)
        return 2
    except StorageError as exc:
        print(f"threadgate: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def load(args: argparse.Namespace) -> Settings:
    """The settings a command runs with. `doctor` reads them leniently: each malformed value
    is kept as a problem to report (`args.malformed`) and read as its default, so that it
    hides neither another problem nor the checks that do not depend on it."""
    if not getattr(args, "lenient", False):
        return load_settings(env_file=ENV_FILE)
    settings, args.malformed = load_settings_leniently(env_file=ENV_FILE)
    return settings


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="threadgate", description="A Slack gateway for an LLM agent.")
    sub = p.add_subparsers(required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve", help="serve Slack events (HTTP, or Socket Mode with SLACK_APP_TOKEN)"
    )
    serve.add_argument("--host", default="0.0.0.0", help="interface to listen on (default 0.0.0.0)")
    port = Settings.field("PORT").default
    serve.add_argument("--port", type=int, default=None, help=f"port (default: PORT, else {port})")
    serve.add_argument(
        "--role",
        choices=ROLES,
        default=None,
        help="ingress: take Slack's events; worker: answer queued tasks; all: both "
        "(default: THREADGATE_ROLE, else all)",
    )
    serve.set_defaults(command=serve_command)
    migrate = sub.add_parser("migrate", help="apply database migrations and exit")
    migrate.set_defaults(command=migrate_command)
    doctor = sub.add_parser(
        "doctor", help="check the settings, the Slack token and scopes, the model and the database"
    )
    doctor.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="bound every check by SECONDS (default: 5 for Slack and the database, 10 for "
        "the model, 30 for MCP servers)",
    )
    doctor.set_defaults(command=doctor_command, lenient=True)
    console = sub.add_parser("console", help="chat with the agent in this terminal, without Slack")
    console.set_defaults(command=console_command)
    add_manifest_parser(sub)
    add_tasks_parser(sub)
    add_schedules_parser(sub)
    add_sessions_parser(sub)
    add_feedback_parser(sub)
    add_usage_parser(sub)
    return p


def add_manifest_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    manifest = sub.add_parser("manifest", help="print the Slack app manifest (YAML)")
    mode = manifest.add_mutually_exclusive_group()
    mode.add_argument("--socket", action="store_true", help="an app for Socket Mode")
    mode.add_argument(
        "--http",
        metavar="URL",
        type=_events_url,
        help="an app receiving events at URL (https; default: a placeholder to edit)",
    )
    manifest.set_defaults(command=manifest_command)


def _events_url(url: str) -> str:
    try:
        return events_url(url)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def serve_command(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.process.service import serve_forever

    for unknown in unknown_variables(settings, os.environ, ENV_FILE):
        log.warning("%s", unknown)
    hand_over(os.environ)  # slack-bolt builds its app from our arguments alone
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    port = settings.process.port if args.port is None else args.port
    settings = with_role(settings, args.role)
    try:
        await serve_forever(settings, args.host, port, stop)
    except OSError as exc:
        if exc.errno not in _BIND_ERRORS:
            raise
        print(f"threadgate: {bind_failure(exc, args.host, port)}", file=sys.stderr)
        return 1
    return 0


def with_role(settings: Settings, role: str | None) -> Settings:
    """The settings `serve` runs with: `--role`, when given, wins over THREADGATE_ROLE."""
    return settings if role is None else settings.replace(threadgate_role=role)


# What binding the HTTP port can fail with: taken, privileged, or not an address of ours.
_BIND_ERRORS = (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL)


def bind_failure(exc: OSError, host: str, port: int) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"PORT {port} is already in use: stop the process listening there, "
            "or set PORT (or --port) to a free port."
        )
    reason = exc.strerror or type(exc).__name__
    return f"Cannot listen on {host}:{port} ({reason}): check --host and PORT (or --port)."


async def migrate_command(settings: Settings, args: argparse.Namespace) -> int:
    async with Database(await database_dsn(settings), min_size=1, max_size=1) as db:
        applied = await db.migrate()
    print(f"applied migrations: {applied}" if applied else "the schema is up to date")
    return 0


async def doctor_command(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.operator.doctor import Limits, diagnose
    from gateway.operator.reports import report
    from gateway.operator.settings_check import Given

    if settings.telemetry.log_level != "DEBUG":
        # The report says everything the checks found; the libraries' log lines (an HTTP
        # request, a retry, a refused token) would only be mixed into it.
        logging.disable(logging.CRITICAL)
    limits = Limits.uniform(args.timeout) if args.timeout else Limits()
    given = Given(args.malformed, unknown_variables(settings, os.environ, ENV_FILE))
    findings = await diagnose(settings, limits, given=given, progress=_say)
    print(report(findings), flush=True)
    return 1 if any(finding.failed for finding in findings) else 0


def _say(text: str) -> None:
    """A word on stderr while `doctor` waits (its report goes to stdout)."""
    print(f"threadgate doctor: {text}", file=sys.stderr, flush=True)


async def console_command(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.operator.console import run_console

    gc.enable()  # off while the command loaded (gateway/operator/__main__.py)

    return await run_console(settings)


async def manifest_command(settings: Settings, args: argparse.Namespace) -> int:
    manifest = functools.partial(
        render_manifest,
        continue_threads=settings.access.continue_threads,
        oauth=settings.slack.oauth_mode,
        redirect_url=settings.slack.oauth_redirect_url,
        agent_view=settings.assistant.agent_view,
        description=settings.assistant.description,
        prompts=settings.assistant.suggested_prompts,
        workspace_search=settings.tools.workspace_search,
        slash_command=settings.assistant.slash_command,
    )
    if args.socket:
        print(manifest(socket_mode=True), end="")
    else:
        options = {"request_url": args.http} if args.http else {}
        print(manifest(socket_mode=False, **options), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
