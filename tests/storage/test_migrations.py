"""Migrations: recorded, idempotent, safe with two processes starting at once."""

from __future__ import annotations

import asyncio

import asyncpg

from storage.migrations import applied_versions, available_migrations, migrate
from tests.pg import create_database


async def test_two_starters_at_once_apply_each_migration_once(postgres_dsn: str) -> None:
    """Two concurrent migrators leave every migration applied exactly once."""
    dsn = await create_database(postgres_dsn, "concurrent_migrate", empty=True)
    first, second = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    try:
        results = await asyncio.gather(migrate(first), migrate(second))
        versions = [m.version for m in available_migrations()]
        assert sorted(results[0] + results[1]) == versions
        assert await applied_versions(first) == set(versions)
    finally:
        await first.close()
        await second.close()


async def test_migrating_again_applies_nothing(postgres_dsn: str) -> None:
    """A second run finds nothing to do."""
    dsn = await create_database(postgres_dsn, "migrate_twice", empty=True)
    conn = await asyncpg.connect(dsn)
    try:
        assert await migrate(conn)
        assert await migrate(conn) == []
    finally:
        await conn.close()


def test_every_migration_has_a_version_of_its_own() -> None:
    """Two branches that each add `003_…` would make one of them silently skipped (or both
    applied under one version): each file's number is unique, and they count up from 1."""
    versions = [migration.version for migration in available_migrations()]
    assert versions == list(range(1, len(versions) + 1))
