"""The `threadgate` command line.

Each subcommand reads the settings once, and any `ConfigError` or unreachable database
ends the command with one sentence on stderr and a non-zero status — never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from agent.errors import ConfigError
from gateway.config import Settings, load_settings
from gateway.service import database_dsn, serve_forever
from storage.database import Database
from storage.errors import StorageError

log = logging.getLogger("threadgate")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = load_settings()
        logging.basicConfig(
            level=settings.threadgate_log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s %(message)s",
        )
        return int(asyncio.run(args.command(settings, args)) or 0)
    except ConfigError as exc:
        print(f"threadgate: {exc}", file=sys.stderr)
        return 2
    except StorageError as exc:
        print(f"threadgate: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="threadgate", description="A Slack gateway for an LLM agent.")
    sub = p.add_subparsers(required=True, metavar="COMMAND")
    serve = sub.add_parser(
        "serve", help="serve Slack events (HTTP, or Socket Mode with SLACK_APP_TOKEN)"
    )
    serve.add_argument("--host", default="0.0.0.0", help="interface to listen on (default 0.0.0.0)")
    serve.add_argument("--port", type=int, default=None, help="port (default: PORT, else 3000)")
    serve.set_defaults(command=serve_command)
    migrate = sub.add_parser("migrate", help="apply database migrations and exit")
    migrate.set_defaults(command=migrate_command)
    return p


async def serve_command(settings: Settings, args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve_forever(settings, args.host, args.port or settings.port, stop)
    return 0


async def migrate_command(settings: Settings, args: argparse.Namespace) -> int:
    async with Database(await database_dsn(settings), min_size=1, max_size=1) as db:
        applied = await db.migrate()
    print(f"applied migrations: {applied}" if applied else "the schema is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
