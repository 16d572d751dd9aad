"""A real PostgreSQL server for the suite: `DATABASE_URL` if given, else the embedded one.

Each test module gets a database of its own, created fresh and migrated, so modules never
see each other's rows and a failure leaves its database behind for a post-mortem.
"""

from __future__ import annotations

import itertools
import os
import re
import urllib.parse
from pathlib import Path

import asyncpg

from storage.embedded import start_embedded_postgres

_counter = itertools.count()


async def server_dsn(data_dir: Path) -> str:
    return os.environ.get("DATABASE_URL") or await start_embedded_postgres(data_dir)


def with_database(dsn: str, name: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


async def create_database(dsn: str, label: str) -> str:
    """Create an empty database named after `label` and return its DSN."""
    name = f"tg_{re.sub(r'[^a-z0-9]+', '_', label.lower())[-40:]}_{os.getpid()}_{next(_counter)}"
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return with_database(dsn, name)
