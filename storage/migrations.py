"""Versioned schema migrations, applied at start-up.

Migrations are the numbered `.sql` files beside this module, applied in order together
with their rows in `schema_migrations`, all in one transaction: a failure leaves the schema
as it was. A transaction-scoped advisory lock serialises concurrent starters (two replicas
booting at once): the second waits, then finds nothing left to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from storage.errors import MigrationError

# A plain connection or one borrowed from the pool: migrations run on either.
Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"

# An arbitrary constant: the advisory lock key every threadgate process agrees on.
_LOCK_KEY = 0x7468_7267


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    folder = resources.files("storage") / "migrations"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append(Migration(version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda m: m.version)


async def applied_versions(conn: Connection) -> set[int]:
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return set()
    return {row["version"] for row in await conn.fetch("SELECT version FROM schema_migrations")}


async def pending_migrations(conn: Connection) -> list[Migration]:
    done = await applied_versions(conn)
    return [m for m in available_migrations() if m.version not in done]


async def migrate(conn: Connection) -> list[int]:
    """Apply every pending migration; return the versions this call applied."""
    applied = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in await pending_migrations(conn):
            await _apply(conn, migration)
            applied.append(migration.version)
    return applied


async def _apply(conn: Connection, migration: Migration) -> None:
    try:
        async with conn.transaction():  # a savepoint: the error names the failing file
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                migration.version,
                migration.name,
            )
    except asyncpg.PostgresError as exc:
        raise MigrationError(f"Migration {migration.name} failed: {exc}") from exc
