"""A real PostgreSQL server for the suite: `DATABASE_URL` if given, else the embedded one.

Each test module gets a database of its own, created fresh and migrated, so modules never
see each other's rows and a failure leaves its database behind for a post-mortem.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import urllib.parse
from pathlib import Path

import asyncpg

from storage.database import Database
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


async def drop_database(dsn: str) -> None:
    """Drop the database `dsn` names, with whatever connections are still open on it."""
    name = urllib.parse.urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(with_database(dsn, "postgres"))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def wait_for_value(
    db: Database, query: str, expected: object, *args: object, deadline: float = 30
) -> None:
    """Wait until `query` returns `expected`, woken by the queue's NOTIFYs, with a deadline.

    The event is cleared *before* each look, so a NOTIFY that arrives between the look and
    the wait is not lost.
    """
    async with asyncio.timeout(deadline):
        while True:
            db.wakeup.clear()
            if await db.pool.fetchval(query, *args) == expected:
                return
            await db.wakeup.wait()


async def wait_for_task(db: Database, task_id: str, state: str, deadline: float = 30) -> None:
    """Wait until the task reaches `state`."""
    query = "SELECT state FROM tasks WHERE id = $1"
    await wait_for_value(db, query, state, task_id, deadline=deadline)
