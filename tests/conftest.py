"""Fixtures shared by the whole suite: a real Postgres, one fresh database per module."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import settings

from storage.database import Database
from tests.pg import create_database, server_dsn

# Hypothesis fails an example that runs longer than 200 ms by default: a timed assertion,
# and a flaky one on a busy machine running several suites at once. Speed lives in bench/.
settings.register_profile("threadgate", deadline=None)
settings.load_profile("threadgate")

# Outside pytest's numbered temporary directories: those are pruned by later runs, even
# while an earlier run's server still has its data there. Several runs share the server
# safely (each module creates databases named after its process).
TEST_DATA_DIR = Path(__file__).resolve().parent.parent / ".threadgate" / "test-postgres"


@pytest.fixture(scope="session")
async def postgres_dsn() -> str:
    """The server every test talks to; started once per run."""
    return await server_dsn(TEST_DATA_DIR)


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


@pytest.fixture
async def fresh_dsn(postgres_dsn: str, request: pytest.FixtureRequest) -> str:
    """An empty database for this one test: gateways left with unfinished tasks by an
    earlier test cannot answer them into this test's fakes."""
    return await create_database(postgres_dsn, request.node.name)
