"""A task's model streams slow down once its reply shows: the reply's Slack draft says when
it starts to show (`agent.Showing`), which the round hands to its model requests
(gateway/models/transport.py reads it).

The publisher, its outbox on a real Postgres, and the loopback fake Slack.
"""

from __future__ import annotations

from gateway.delivery.publisher import PublisherSettings, SlackPublisher
from gateway.delivery.streams import StreamSettings
from gateway.slack.client import slack_client
from storage import Admission, Database, Outbox, PostgresTaskQueue, admit
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN

WAIT = 10.0  # a bound on waiting for a condition, never an assertion about time


async def test_a_draft_tells_its_showing_once_its_stream_starts(fresh_dsn: str) -> None:
    """Its count is 0 until the reply's stream starts in the thread, then 1."""
    address = {"channel": "C0PACE", "thread_ts": "1700000000.000100", "user": "U1", "team": "T1"}
    task_id = f"T1:{address['channel']}:{address['thread_ts']}"
    async with FakeSlack(bot_token=BOT_TOKEN) as slack, Database(fresh_dsn) as db:
        assert await admit(db, Admission(None, task_id, task_id, address, "<@UBOT> pace"))
        task = await PostgresTaskQueue(db).claim()
        assert task is not None
        client = slack_client(BOT_TOKEN, slack.url, timeout=15)
        outbox = Outbox(db, call_seconds=5.0, settle_seconds=0.2)
        publisher = SlackPublisher(client, outbox, PublisherSettings(streams=StreamSettings()))
        async with publisher.working(task):
            draft = publisher.draft(task, task.reply_id)
            assert draft.showing.count == 0
            await draft.append("The first words ")
            [stream] = await slack.wait_for_streams(1, timeout=WAIT)
            assert stream.text.startswith("The first words")
            # Closing lets the call under way end: the start, its ts recorded, and told.
            assert await draft.close() is not None
            assert draft.showing.count == 1
        await publisher.aclose()
