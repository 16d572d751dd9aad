"""Fixtures shared by the whole suite: a real Postgres, one fresh database per module."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.database import Database
from tests.pg import create_database, server_dsn


@pytest.fixture(scope="session")
async def postgres_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The server every test talks to; started once per run."""
    return await server_dsn(Path(tmp_path_factory.mktemp("postgres")))


@pytest.fixture(scope="module")
async def database_dsn(postgres_dsn: str, request: pytest.FixtureRequest) -> str:
    """An empty database for this test module."""
    return await create_database(postgres_dsn, request.module.__name__)


@pytest.fixture(scope="module")
async def db(database_dsn: str) -> AsyncIterator[Database]:
    """An open, migrated `Database` for this test module."""
    async with Database(database_dsn) as database:
        await database.migrate()
        yield database
