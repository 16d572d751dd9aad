"""Fixtures shared by the whole suite: a real Postgres, one fresh migrated database per
module (or per test), copied from a template migrated once per test process (`tests.pg`).

And what makes the suite hermetic, set up before any test is collected: the shell's
gateway settings are removed from the environment (`tests.hermetic`), and every socket may
reach loopback and Unix sockets only (`tests.netguard`; gateway children get the same guard
through `child_env`).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import settings

from storage import Database
from tests import hermetic
from tests.netguard import loopback_guard
from tests.pg import create_database, prepare_embedded_server, server_dsn

# Hypothesis fails an example that runs longer than 200 ms by default: a timed assertion,
# and a flaky one on a busy machine running several suites at once. Speed lives in bench/.
settings.register_profile("threadgate", deadline=None)
settings.load_profile("threadgate")

_scrubbed: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Before collection: test modules and the embedded Postgres see the scrubbed
    environment, and the first connection anyone makes is already guarded."""
    _scrubbed[:] = hermetic.scrub(os.environ)
    loopback_guard.install()
    if not hasattr(config, "workerinput"):  # the run's first process, xdist's or the only one
        prepare_embedded_server(TEST_DATA_DIR)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The chaos scenarios first, each module's tests still together and in order: they are
    the longest tests (real gateway processes, many messages), and a run whose last test is
    a long one has one worker on it while the others wait (`-n 3 --dist worksteal`)."""
    items.sort(key=lambda item: not item.nodeid.startswith("tests/chaos/"))


def pytest_report_header(config: pytest.Config) -> str | None:
    # Names only: the values may be real secrets.
    return f"removed from the environment: {', '.join(_scrubbed)}" if _scrubbed else None


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
    """A migrated database for this test module."""
    return await create_database(postgres_dsn, request.module.__name__)


@pytest.fixture(scope="module")
async def db(database_dsn: str) -> AsyncIterator[Database]:
    """An open, migrated `Database` for this test module."""
    async with Database(database_dsn) as database:
        yield database


@pytest.fixture
async def fresh_dsn(postgres_dsn: str, request: pytest.FixtureRequest) -> str:
    """A migrated database for this one test: gateways left with unfinished tasks by an
    earlier test cannot answer them into this test's fakes."""
    return await create_database(postgres_dsn, request.node.name)
