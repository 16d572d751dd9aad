"""Benchmark: Slack read calls per 100 mentions in threads the gateway knows (issue 43).

Slack allows a distributed app one `conversations.replies` and one `conversations.history`
call a minute per workspace, so what matters is how many a gateway makes, not how fast.
A real `threadgate serve` answers mentions in ten threads of one channel whose root and
replies it received as events, each mention after a reply to someone else (context, not a
task): store first, it should read nothing from Slack. The same conversation again with
THREADGATE_CONTINUE_THREADS off (no channel message events: only the mentions arrive)
shows what store first saves: each mention then refreshes its thread from Slack, after
the last stored message.

    .venv/bin/python -m bench.slack_reads
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from bench import run as bench_run
from bench.stack import NO_GUARD_RAILS, scratch_database, stop
from storage.database import Database
from tests.chaos.harness import wait_until_settled
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import (
    app_mention_event,
    deliver,
    event_callback,
    message_event,
    new_ts,
)
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, SECRET, echo, gateway_env
from tests.pg import server_dsn

CHANNEL = "C0BENCHRD1"
THREADS = 10
READS = ("conversations.replies", "conversations.history")


class Channel:
    """The conversation: Slack holds every message; the gateway gets the events of the
    ones it is sent (`events`: the channel's messages too, else only mentions)."""

    def __init__(self, slack: FakeSlack, http: aiohttp.ClientSession, url: str, events: bool):
        self.slack, self.http, self.url, self.events = slack, http, url, events

    async def say(self, text: str, *, thread: str | None = None, mention: bool = False) -> str:
        ts = new_ts()
        self.slack.seed_message(CHANNEL, ts, "U0BOB00001", text, thread_ts=thread)
        if mention or self.events:
            kind = app_mention_event if mention else message_event
            event = kind(text=text, channel=CHANNEL, ts=ts, thread_ts=thread, user="U0BOB00001")
            status, _ = await deliver(self.http, self.url, event_callback(event), SECRET)
            assert status == 200, status
        return ts


async def measure(server: str, data: Path, *, events: bool, mentions: int) -> dict[str, Any]:
    """Ten threads seen from their start, then `mentions` mentions among them, each after
    a reply to someone else; the Slack reads they cost."""
    overrides: Mapping[str, str] = {} if events else {"THREADGATE_CONTINUE_THREADS": "false"}
    label = f"bench_slack_reads_{'events' if events else 'mentions'}"
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
        scratch_database(server, label) as dsn,
    ):
        model.default = echo
        gateway = GatewayProcess(
            {**gateway_env(slack, model, dsn), **NO_GUARD_RAILS, **overrides}, data
        )
        await gateway.start()
        try:
            channel = Channel(slack, http, gateway.events_url, events)
            roots = [await channel.say(f"topic {n}") for n in range(THREADS)]
            for root in roots:
                await channel.say("first thoughts", thread=root)
            before = _reads(slack)
            for n in range(mentions):
                root = roots[n % THREADS]
                await channel.say(f"<@U0ALICE01> what about {n}?", thread=root)
                await channel.say(f"<@UBOT> sum it up {n}", thread=root, mention=True)
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_until_settled(db, deadline=300)
            reads = _reads(slack) - before
        finally:
            await stop(gateway)
    return {
        "events": events,
        "mentions": mentions,
        "reads": reads,
        "reads_per_100_mentions": reads * 100 / mentions,
    }


def _reads(slack: FakeSlack) -> int:
    return sum(len(slack.calls_to(method)) for method in READS)


async def run_all(dsn: str, data: Path) -> dict[str, Any]:
    runs = [
        await measure(dsn, data, events=True, mentions=100),
        await measure(dsn, data, events=False, mentions=30),
    ]
    for found in runs:
        print(f"  slack reads: {found}", flush=True)
    return {"runs": runs}


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await run_all(await server_dsn(Path(tmp)), Path(tmp))


if __name__ == "__main__":
    bench_run(main())
