"""What the storage tests share: a migrated database of each test's own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storage import Database
from tests.pg import create_database


@pytest.fixture
async def fresh_db(postgres_dsn: str, request: pytest.FixtureRequest) -> AsyncIterator[Database]:
    """A database of its own per test, migrated: tests that look at every row of a table."""
    dsn = await create_database(postgres_dsn, request.node.name)
    async with Database(dsn) as database:
        yield database
