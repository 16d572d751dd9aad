"""A lost lease stops its worker, and two claimers of one post never both post it.

Only the gateway's idle LISTEN connection drops (an idle timeout, `pg_terminate_backend`,
a failover): its leases may be taken over at once — by another replica, or by its own
idle workers — while the worker that holds one is still calling the model. That worker
must stop before it publishes, and whatever it still tries to publish is refused. And an
outbox claim is not a lock: a claimer that finds an earlier call's outcome unknown looks
in the thread only once that call must be over.

The first scenario runs a real gateway process; the others play two replicas in this
process (two `Database`s: two pools, two signal connections, two lease owners) against
one fake Slack, so that a post can be held mid-call exactly where the race is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from agent import Task
from gateway.delivery.publisher import PublisherSettings, SlackPublisher
from gateway.slack.client import slack_client
from storage import Superseded
from storage.admission import Admission, admit
from storage.database import LEASE_LOCK_SPACE, Database
from storage.outbox import Outbox
from storage.queue import PostgresTaskQueue
from tests.chaos.harness import (
    Processes,
    answered,
    assert_exactly_once_in_order,
    conversations,
    deliver_until_acked,
    wait_until_settled,
)
from tests.fakes.openai_api import Held, OpenAIServer, RecordedRequest, Reply
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database

# The in-process replicas' post time limit and settle margin. The margin is what a call
# Slack finishes after its caller gave up may take to land: the test lands it at once.
CALL_SECONDS = 2.0
SETTLE_SECONDS = 3.0

# The signal connection, as the server sees it: idle after LISTEN (old and new code alike).
_LISTENERS = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND state = 'idle' AND query LIKE 'LISTEN %'
"""


async def test_listen_connection_killed_mid_model_call_answers_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """`pg_terminate_backend` on the gateway's LISTEN connection while the model call is
    held: the task is taken over at once, the worker that held it stops without posting,
    and the thread gets exactly one reply.

    Posts are held, so that a stale worker that went on would find the thread empty and
    post a second copy: the scenario waits until either that happened or the stale
    worker stopped (its "is thinking…" cleared while the current attempt's post is held).
    """
    dsn = await create_database(postgres_dsn, "chaos_listen_killed")
    processes = Processes(tmp_path)
    release, reached = asyncio.Event(), asyncio.Event()

    def held_first(seen: RecordedRequest) -> Reply:
        reached.set()
        return Held(release, echo(seen))

    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.script(held_first)
        model.default = echo
        [thread] = conversations(1, prefix="C0LISTENKILL")
        sent = thread.next_message()
        try:
            # The status at once: its clearing is how the stale worker is seen to stop.
            env = {**gateway_env(slack, model, dsn), "THREADGATE_STATUS_DELAY_SECONDS": "0"}
            web = await processes.start(env)
            await deliver_until_acked(http, lambda: web.events_url, sent)
            await asyncio.wait_for(reached.wait(), 30)
            posting = slack.hold("chat.postMessage")
            conn = await asyncpg.connect(dsn)
            try:
                listeners = [r["pid"] for r in await conn.fetch(_LISTENERS)]
                assert len(listeners) == 1, listeners
                assert await conn.fetchval("SELECT pg_terminate_backend($1)", listeners[0])
            finally:
                await conn.close()
            posts = lambda: len(slack.calls_to("chat.postMessage"))  # noqa: E731
            await slack.wait_until(lambda: posts() >= 1, 60, what="the take-over's post")
            release.set()  # the first model call answers now, in case its worker still waits

            def stale_worker_done() -> bool:
                cleared = any(
                    s.thread_ts == sent.thread_ts and not s.status for s in slack.statuses
                )
                return cleared or posts() >= 2

            await slack.wait_until(stale_worker_done, 60, what="the stale worker to stop or post")
            posting.set()
            await slack.wait_until(answered(slack, [sent]), 60, what="the reply")
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db)
        finally:
            await processes.stop_all()
    assert_exactly_once_in_order(slack, [sent])
    assert len(slack.calls_to("chat.postMessage")) == 1


class Replica:
    """One gateway's database side and publisher, in this process."""

    def __init__(self, db: Database, slack: FakeSlack) -> None:
        self.db = db
        self.queue = PostgresTaskQueue(db)
        outbox = Outbox(db, call_seconds=CALL_SECONDS, settle_seconds=SETTLE_SECONDS)
        client = slack_client(BOT_TOKEN, slack.url, timeout=CALL_SECONDS)
        self.publisher = SlackPublisher(
            client, outbox, PublisherSettings(bot_user_id=slack.bot_user_id)
        )

    async def lose_signal_connection(self, admin: asyncpg.Connection) -> None:
        """Its signal connection is terminated (its lease owner's lock goes with it)."""
        owner = await self.db.lease_owner()
        dropped = asyncio.create_task(self.db.leases_in_doubt())
        terminated = await admin.fetchval(
            "SELECT bool_and(pg_terminate_backend(pid)) FROM pg_locks"
            " WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND objsubid = 2",
            LEASE_LOCK_SPACE,
            owner,
        )
        assert terminated
        await asyncio.wait_for(dropped, 10)


@pytest.fixture
async def two_replicas(
    postgres_dsn: str, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[FakeSlack, Replica, Replica, asyncpg.Connection, Task]]:
    """Two replicas on one database, the fake Slack, an admin connection, and a task
    whose lease the first replica holds."""
    dsn = await create_database(postgres_dsn, request.node.name)
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        Database(dsn) as first_db,
        Database(dsn) as second_db,
    ):
        address = {"channel": "C0RACE", "thread_ts": "1700000000.000100"}
        slack.seed_message(address["channel"], address["thread_ts"], "U1", "<@UBOT> race")
        task_id = f"T1:{address['channel']}:{address['thread_ts']}"
        admitted = Admission(None, task_id, task_id, address, "<@UBOT> race")
        assert await admit(first_db, admitted)
        first, second = Replica(first_db, slack), Replica(second_db, slack)
        task = await first.queue.claim()
        assert task is not None and task.attempts == 1
        admin = await asyncpg.connect(dsn)
        try:
            yield slack, first, second, admin, task
        finally:
            await admin.close()


async def test_two_replicas_racing_on_one_outbox_row_post_once(
    two_replicas: tuple[FakeSlack, Replica, Replica, asyncpg.Connection, Task],
) -> None:
    """The first replica's post is on its way (held by Slack) when it loses its lease;
    the second takes the task over and publishes the same reply. It must not look in the
    thread before the first call must be over, and the first replica must not look or
    post again once that call gave up: one post."""
    slack, first, second, admin, task = two_replicas
    posting = slack.hold("chat.postMessage")
    async with asyncio.timeout(60):
        first_publish = asyncio.create_task(first.publisher.publish(task, task.reply_id, "42"))
        await slack.wait_until(lambda: len(slack.calls_to("chat.postMessage")) == 1)
        await first.lose_signal_connection(admin)
        taken_over = await second.queue.claim()
        assert taken_over is not None and taken_over.attempts == 2
        second_publish = asyncio.create_task(
            second.publisher.publish(taken_over, taken_over.reply_id, "42")
        )
        # The first call gives up at its time limit; its replica is superseded by then.
        with pytest.raises(Superseded):
            await first_publish
        posting.set()  # Slack finishes the abandoned call late, within the settle margin
        await second_publish
    assert [p.text for p in slack.posts] == ["42"]
    assert len(slack.calls_to("chat.postMessage")) == 1


async def test_a_superseded_attempt_posts_nothing(
    two_replicas: tuple[FakeSlack, Replica, Replica, asyncpg.Connection, Task],
) -> None:
    """A replica whose task was taken over before it published is refused outright: no
    search of the thread, no post; the current attempt posts once."""
    slack, first, second, admin, task = two_replicas
    await first.lose_signal_connection(admin)
    taken_over = await second.queue.claim()
    assert taken_over is not None and taken_over.attempts == 2
    with pytest.raises(Superseded):
        await first.publisher.publish(task, task.reply_id, "stale")
    assert slack.calls == []
    await second.publisher.publish(taken_over, taken_over.reply_id, "current")
    assert [p.text for p in slack.posts] == ["current"]
