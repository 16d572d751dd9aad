"""Lease liveness across replicas: an advisory lock every role can see, bound for good
to the signal connection that took the lease."""

from __future__ import annotations

import asyncio
import os
import urllib.parse
from collections.abc import AsyncIterator

import asyncpg
import pytest

from agent import Delegation, SubtaskRequest
from storage import Admission, Database, PostgresDelegations, PostgresTaskQueue, admit
from storage.database import LEASE_LOCK_SPACE
from tests.pg import create_database

ADDRESS = {"channel": "C1", "thread_ts": "1.0"}


def as_role(dsn: str, role: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{role}@{host}"))


@pytest.fixture
async def two_roles(
    postgres_dsn: str, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[str, str, str]]:
    """A migrated database, and DSNs for two login roles that may use its tables but do
    not have `pg_read_all_stats` (as replicas deployed under different roles)."""
    dsn = await create_database(postgres_dsn, request.node.name)
    admin = await asyncpg.connect(dsn)
    try:
        allowed = await admin.fetchval(
            "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
        )
        if not allowed:
            pytest.skip("the test server's user may not create roles")
        roles = [f"tg_replica_{os.getpid()}_{n}" for n in range(2)]
        for role in roles:
            await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
            await admin.execute(f'CREATE ROLE "{role}" LOGIN')
            await admin.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"')
            await admin.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
        try:
            yield dsn, as_role(dsn, roles[0]), as_role(dsn, roles[1])
        finally:
            for role in roles:
                await admin.execute(f'DROP OWNED BY "{role}"')
                await admin.execute(f'DROP ROLE "{role}"')
    finally:
        await admin.close()


async def test_a_live_replica_under_another_role_keeps_its_leases(
    two_roles: tuple[str, str, str],
) -> None:
    """A replica cannot read another role's backends in pg_stat_activity; it must still
    see that the other replica is alive and leave its task and subtask alone, and take
    them over at once when that replica is gone."""
    admin_dsn, first_dsn, second_dsn = two_roles
    task_id = "T1:C1:1.0"
    async with Database(admin_dsn) as admin:
        assert await admit(admin, Admission(None, task_id, task_id, ADDRESS, "question"))
    async with Database(second_dsn) as second:
        async with Database(first_dsn) as first:
            task = await PostgresTaskQueue(first).claim()
            assert task is not None and task.attempts == 1
            hidden = await second.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND backend_start IS NULL"
            )
            assert hidden >= 1, "the other role's backends should be hidden from this one"
            assert await PostgresTaskQueue(second).claim() is None
            assert await PostgresTaskQueue(first).heartbeat(task)
        # The first replica is gone (its connections closed, as in a crash).
        resumed = await PostgresTaskQueue(second).claim()
        assert resumed is not None and resumed.id == task_id and resumed.attempts == 2


async def test_a_live_replica_under_another_role_keeps_its_subtasks(
    two_roles: tuple[str, str, str],
) -> None:
    """The same for a subtask lease."""
    admin_dsn, first_dsn, second_dsn = two_roles
    task_id = "T1:C1:2.0"
    async with Database(admin_dsn) as admin:
        assert await admit(admin, Admission(None, task_id, task_id, ADDRESS, "question"))
    delegation = Delegation(
        "On it", (SubtaskRequest("agent", {"instructions": "look"}),), "call_1", "{}"
    )
    async with Database(second_dsn) as second:
        async with Database(first_dsn) as first:
            task = await PostgresTaskQueue(first).claim()
            assert task is not None
            rounds = PostgresDelegations(first)
            await rounds.record(task, 0, delegation, timeout_seconds=600)
            await rounds.await_subtasks(task)
            claimed = await rounds.claim_subtask()
            assert claimed is not None
            assert await PostgresDelegations(second).claim_subtask() is None
            assert await rounds.heartbeat_subtask(claimed[0])
        resumed = await PostgresDelegations(second).claim_subtask()
        assert resumed is not None and resumed[0].attempts == 2


async def test_a_lease_is_lost_with_the_signal_connection_that_took_it(
    postgres_dsn: str,
) -> None:
    """Only the signal connection drops: the process hears of it at once, the lease it
    took before is lost for good (its heartbeat and its finish change nothing), and the
    task is claimable at once, here by the same process under its new owner."""
    dsn = await create_database(postgres_dsn, "lease_lost_with_signals")
    async with Database(dsn) as db:
        task_id = "T1:C1:3.0"
        assert await admit(db, Admission(None, task_id, task_id, ADDRESS, "question"))
        queue = PostgresTaskQueue(db)
        task = await queue.claim()
        assert task is not None
        owner = await db.lease_owner()
        in_doubt = asyncio.create_task(db.leases_in_doubt())
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval(
                "SELECT bool_and(pg_terminate_backend(pid)) FROM pg_locks"
                " WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND objsubid = 2",
                LEASE_LOCK_SPACE,
                owner,
            )
            await asyncio.wait_for(in_doubt, 10)
            assert not await queue.heartbeat(task)
            again = await queue.claim()
            assert again is not None and again.attempts == 2
            assert await db.lease_owner() != owner
            await queue.finish(task)  # the lost attempt: nothing happens
            state = await conn.fetchval("SELECT state FROM tasks WHERE id = $1", task_id)
            assert state == "running"
            assert await queue.heartbeat(again)
            await queue.finish(again)
            state = await conn.fetchval("SELECT state FROM tasks WHERE id = $1", task_id)
            assert state == "done"
        finally:
            await conn.close()


async def test_a_process_that_runs_no_task_listens_only_when_a_lease_is_asked(
    postgres_dsn: str,
) -> None:
    """`signals=False` (an ingress): no LISTEN connection is opened with the pool; one is,
    with its owner lock, the first time a lease owner is asked for."""
    dsn = await create_database(postgres_dsn, "leases_no_signals")
    listening = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = $1 AND datname = current_database()"
    )
    async with Database(dsn, min_size=1, max_size=1, signals=False) as db:
        assert await db.pool.fetchval(listening, "threadgate-signals") == 0
        owner = await db.lease_owner()
        assert await db.pool.fetchval(listening, "threadgate-signals") == 1
        held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1"
        assert await db.pool.fetchval(held, owner) == 1


async def test_one_connection_is_a_pool_of_one(postgres_dsn: str) -> None:
    """THREADGATE_DB_CONNECTIONS=1 opens a pool of one (not refused for its minimum of 2)."""
    dsn = await create_database(postgres_dsn, "leases_pool_of_one")
    async with Database(dsn, max_size=1) as db:
        assert await db.pool.fetchval("SELECT 1") == 1 and db.pool.max_size == 1
