"""Outages across replicas: one replica's outage is every replica's, and whichever
replica's model answers first wakes every waiting task (gateway/process/outages.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from agent import OutageTracker, Recovery, Route, Supervisor, TransientModelError
from gateway.config.settings import Settings
from gateway.operator.doctor import Limits, check_waiting
from gateway.process.outages import OutageWatch, down_text, up_text, watch_outages
from gateway.telemetry.metrics import Metrics
from storage import Admission, Database, PostgresModelWaits, PostgresTaskQueue, admit
from tests.pg import create_database

ROUTE = Route("openai", "gpt-main", 0, "OPENAI_API_KEY")
DOWN = TransientModelError(f"{ROUTE} is unavailable for now (HTTP 503, server_error)")


@dataclass
class Replica:
    db: Database
    tracker: OutageTracker
    metrics: Metrics
    supervisor: Supervisor
    watch: OutageWatch


@asynccontextmanager
async def replica(dsn: str) -> AsyncIterator[Replica]:
    """A worker process's outage parts on a database of its own connections."""
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(Database(dsn, min_size=1, max_size=2))
        await db.lease_owner()  # listening, as a worker process is
        supervisor = Supervisor()
        stack.push_async_callback(supervisor.aclose)
        tracker, metrics = OutageTracker(), Metrics()
        watch = watch_outages(tracker, db, supervisor, metrics, alerts=None)
        yield Replica(db, tracker, metrics, supervisor, watch)


async def waiting_task(db: Database, thread: str) -> str:
    task_id = f"T1:C1:{thread}"
    address = {"channel": "C1", "thread_ts": thread}
    assert await admit(db, Admission(None, task_id, f"T1:C1:{thread}", address, "hello"))
    task = await PostgresTaskQueue(db).claim()
    assert task is not None and task.id == task_id
    await PostgresModelWaits(db).defer(task, 3600, "every model slot is unavailable for now")
    return task_id


async def until(condition: Callable[[], bool], event: asyncio.Event) -> None:
    """Wait (at most 10 s) until `condition()` holds, looking again whenever `event` is set."""
    async with asyncio.timeout(10):
        while not condition():
            event.clear()
            await event.wait()


async def test_the_replica_whose_model_answers_first_ends_every_replica_s_outage(
    postgres_dsn: str,
) -> None:
    """Replica A sees every route down and announces it; replica B, whose tasks never
    failed, hears it, and its next answer makes A's waiting task runnable now and ends
    A's outage too."""
    dsn = await create_database(postgres_dsn, "gateway_outages_replicas")
    async with replica(dsn) as a, replica(dsn) as b:
        task_id = await waiting_task(a.db, "1.0")
        a.tracker.failed(ROUTE, DOWN)
        a.tracker.unavailable()
        await until(lambda: b.tracker.outage is not None, b.db.wakeup)
        assert b.tracker.outage is not None and b.tracker.outage.heard
        a.db.wakeup.clear()
        b.tracker.answered(ROUTE)
        await until(lambda: a.tracker.outage is None, a.db.wakeup)
        runnable = await a.db.pool.fetchval(
            "SELECT state = 'queued' AND run_after <= now() FROM tasks WHERE id = $1", task_id
        )
        assert runnable


async def test_the_route_gauge_follows_the_tracker(postgres_dsn: str) -> None:
    """`threadgate_model_route_up` is 0 after a failure and 1 after an answer."""
    dsn = await create_database(postgres_dsn, "gateway_outages_gauge")
    async with replica(dsn) as a:
        gauge = a.metrics.route_up.labels("openai:gpt-main")
        a.tracker.failed(ROUTE, DOWN)
        assert gauge._value.get() == 0
        a.tracker.answered(ROUTE)
        assert gauge._value.get() == 1


def test_the_alerts_name_the_routes_and_never_a_key() -> None:
    """The alerts say what failed and what happens, naming the key's variable at most."""
    tracker = OutageTracker(clock=lambda: 0.0)
    tracker.failed(ROUTE, DOWN)
    tracker.unavailable()
    outage = tracker.outage
    assert outage is not None
    began = down_text(outage)
    assert "Every model route is unavailable" in began and "HTTP 503" in began
    ended = up_text(Recovery(outage, ROUTE, 75.0))
    assert ended.startswith(":white_check_mark: The models are available again after 75 s")
    assert "sk-" not in began + ended


async def test_doctor_names_the_messages_waiting_for_the_models(postgres_dsn: str) -> None:
    """`doctor` says nothing while no message waits for the models, and warns with how
    many and for how long when some do."""
    dsn = await create_database(postgres_dsn, "gateway_outages_doctor")
    settings = Settings(slack_bot_token="xoxb-test", database_url=dsn)
    assert await check_waiting(settings, Limits()) == []
    async with Database(dsn, min_size=1, max_size=1) as db:
        await waiting_task(db, "1.0")
    [finding] = await check_waiting(settings, Limits())
    assert finding.status == "warn" and finding.detail.startswith("1 message(s) wait because")
