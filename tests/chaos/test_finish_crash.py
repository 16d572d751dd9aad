"""Crash between a reply's landing and its task's finish: the one statement that records
both (storage/queue.py `_FINISH_DELIVERED`, `agent.Delivered`) never committed.

The reply's last Slack call lands (a stream's `chat.stopStream`, or a whole reply's
`chat.postMessage`), then the gateway's finish, which would mark the post sent and end
the task together, is held on the task's row (a lock the test takes while the call is
held) and the process is SIGKILLed with its statement's backend, so that nothing of the
finish commits. The process that takes the task over must find the reply where it is —
the open stream completed again, the post found in the thread — and post nothing twice.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from tests.chaos.harness import Processes, conversations, deliver_until_acked
from tests.fakes.openai_api import OpenAIServer, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN, STREAMING, gateway_env
from tests.pg import create_database

FAST = {
    # Slack shows a stored post at once here; the margins only pace the test.
    "THREADGATE_SLACK_SETTLE_SECONDS": "0.5",
    "THREADGATE_SLACK_TIMEOUT_SECONDS": "3",
    "THREADGATE_WORKERS": "2",
}
# The gateway's finish, waiting for the task's row.
_HELD_FINISH = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
  AND query LIKE '%sent AS (%' AND query LIKE '%done AS (%'
"""


# The task done, its reply's post marked sent (a pid-shaped answer for `_wait_for`).
_DONE = """
SELECT 1 AS pid FROM tasks t JOIN outbox o ON o.id = 'task:' || t.id || ':reply'
WHERE t.id = $1 AND t.state = 'done' AND o.state = 'sent'
"""


def answering(seen: RecordedRequest) -> Reply:
    return reply_with_tool("final_reply", {"text": "The whole answer, once."})


async def _wait_for(conn: asyncpg.Connection, query: str, *args: object) -> list[int]:
    """The pids `query` finds, once it finds any (within 30 s). The server's view of its
    backends is read afresh each time (inside a transaction it is kept as first read)."""
    async with asyncio.timeout(30):
        while True:
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            if pids := [row["pid"] for row in await conn.fetch(query, *args)]:
                return pids
            # The server's state is polled: nothing here can be woken by it.
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "posted"])
async def test_a_crash_before_the_finish_leaves_one_reply_and_ends_the_task(
    postgres_dsn: str, tmp_path: Path, streaming: bool
) -> None:
    """Killed after its reply landed and before the finish that marks it sent committed,
    the task is finished by the next process with the thread showing that reply once."""
    dsn = await create_database(postgres_dsn, f"chaos_finish_{'stream' if streaming else 'post'}")
    processes = Processes(tmp_path)
    [thread] = conversations(1, prefix="C0FINISHKILL")
    last_call = "chat.stopStream" if streaming else "chat.postMessage"
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = answering
        env = gateway_env(slack, model, dsn) | FAST | (STREAMING if streaming else {})
        db = await asyncpg.connect(dsn)
        try:
            web = await processes.start(env)
            release = slack.hold(last_call)
            sent = thread.next_message("finish ")
            await deliver_until_acked(http, lambda: web.events_url, sent)
            await slack.wait_until(lambda: bool(slack.calls_to(last_call)), 30, what=last_call)
            # The call is held before Slack acts on it; the post's claim is behind us.
            async with db.transaction():
                await db.execute("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE", sent.task_id)
                release.set()  # the reply lands; the finish then waits for our lock
                [backend] = await _wait_for(db, _HELD_FINISH)
                await web.kill()
                await db.execute("SELECT pg_terminate_backend($1)", backend)
            row = await db.fetchrow(
                "SELECT t.state, o.state AS post FROM tasks t, outbox o"
                " WHERE t.id = $1 AND o.id = 'task:' || t.id || ':reply'",
                sent.task_id,
            )
            assert row is not None and row["state"] == "running" and row["post"] != "sent"
            await processes.start(env)
            await _wait_for(db, _DONE, sent.task_id)  # taken over and finished
        finally:
            await db.close()
            await processes.stop_all()
    mine = [
        m
        for m in slack.messages.get(sent.channel, [])
        if m.get("user") == slack.bot_user_id and m.get("thread_ts") == sent.thread_ts
    ]
    assert len(mine) == 1, slack.describe()
    [message] = mine
    assert message["metadata"]["event_payload"]["outbox_id"] == f"task:{sent.task_id}:reply"
    assert len(slack.posts) == (0 if streaming else 1), slack.describe()
