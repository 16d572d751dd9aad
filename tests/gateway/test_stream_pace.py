"""A task's model streams slow down once its reply shows: the publisher counts the replies
a task shows in Slack where the model transport reads them (agent/models/providers/transport.py).

The publisher, its outbox on a real Postgres, and the loopback fake Slack; the count is
read as a stream requested in the task's round would read it.
"""

from __future__ import annotations

from agent.models.providers.transport import current_shown
from gateway.delivery.publisher import SlackPublisher
from gateway.delivery.streams import StreamSettings
from gateway.slack.client import slack_client
from storage import Admission, Database, Outbox, PostgresTaskQueue, admit
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN

WAIT = 10.0  # a bound on waiting for a condition, never an assertion about time


async def test_a_task_counts_its_reply_as_shown_once_its_stream_starts(fresh_dsn: str) -> None:
    """Inside the task's round the count is there and at 0; the reply's stream starting
    in the thread makes it 1; outside any round there is none."""
    address = {"channel": "C0PACE", "thread_ts": "1700000000.000100", "user": "U1", "team": "T1"}
    task_id = f"T1:{address['channel']}:{address['thread_ts']}"
    async with FakeSlack(bot_token=BOT_TOKEN) as slack, Database(fresh_dsn) as db:
        assert await admit(db, Admission(None, task_id, task_id, address, "<@UBOT> pace"))
        task = await PostgresTaskQueue(db).claim()
        assert task is not None
        client = slack_client(BOT_TOKEN, slack.url)
        outbox = Outbox(db, call_seconds=5.0, settle_seconds=0.2)
        publisher = SlackPublisher(client, outbox, streams=StreamSettings())
        assert current_shown() is None
        async with publisher.working(task):
            replies = current_shown()
            assert replies is not None and replies.count == 0
            draft = publisher.draft(task, task.reply_id)
            await draft.append("The first words ")
            [stream] = await slack.wait_for_streams(1, timeout=WAIT)
            assert stream.text.startswith("The first words")
            # Closing lets the call under way end: the start, its ts recorded, and counted.
            assert await draft.close() is not None
            assert replies.count == 1
        assert current_shown() is None
        await publisher.aclose()
