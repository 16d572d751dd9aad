"""A schedule on two replicas posts once per period, through a SIGKILL of one and its
restart (issue 34). At full scale (`make chaos`) it is the issue's scenario: a one-minute
schedule for three minutes; reduced, a two-second one for four periods.

Both replicas run the scheduler; whichever looks first fires each period, and the other
finds nothing to do. One is killed after the first post and started again after the
second; every period from the first post to the last has exactly one post, at the top of
the channel."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path

from storage.database import Database
from tests.chaos.harness import Processes, scaled
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack, Post
from tests.gateway.rig import BOT_TOKEN, gateway_env
from tests.gateway.schedules_help import (
    add_schedule,
    cli,
    digest_model,
    digests,
    periods,
    runs_settled,
)
from tests.pg import create_database

PERIOD = scaled(60, 2)
PERIODS = scaled(3, 4)
CHANNEL = "C0CHAOSSCH"


async def test_a_schedule_on_two_replicas_posts_once_per_period_through_a_sigkill(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Two replicas, one killed with SIGKILL and restarted: each period of the schedule
    posts exactly once, none skipped, each a new top-level post."""
    dsn = await create_database(postgres_dsn, "chaos_schedules")
    processes = Processes(tmp_path)
    async with FakeSlack(bot_token=BOT_TOKEN) as slack, OpenAIServer() as model:
        model.default = digest_model()
        env = gateway_env(slack, model, dsn) | {
            "THREADGATE_SCHEDULE_MIN_PERIOD_SECONDS": str(PERIOD)
        }
        try:
            first, _ = await processes.start(env), await processes.start(env)
            sid = (
                await add_schedule(
                    env,
                    tmp_path,
                    "--team",
                    "T1",
                    "--channel",
                    CHANNEL,
                    "--every",
                    f"{PERIOD}s",
                    "--prompt",
                    "Summarize the channel",
                )
            )["id"]

            def posted(n: int) -> bool:
                return len(periods(digests(slack, sid))) >= n

            patience = PERIOD * (PERIODS + 2) + 60
            await slack.wait_until(lambda: posted(1), patience, what="the first post")
            await first.kill()
            await slack.wait_until(lambda: posted(2), patience, what="a post after the kill")
            await processes.start(env)
            await slack.wait_until(lambda: posted(PERIODS), patience, what=f"{PERIODS} periods")
            await cli(env, tmp_path, "schedules", "pause", sid)
            async with Database(dsn, min_size=1, max_size=1) as db:
                await runs_settled(db, sid)
            listing = await cli(env, tmp_path, "schedules", "list")
            shown = json.loads(await cli(env, tmp_path, "schedules", "show", sid, "--json"))
        finally:
            await processes.stop_all()
    made = digests(slack, sid)
    counted = periods(made)
    assert set(counted.values()) == {1}, counted
    starts = sorted(datetime.fromisoformat(p) for p in counted)
    gaps = {b - a for a, b in itertools.pairwise(starts)}
    assert gaps == {timedelta(seconds=PERIOD)}, starts
    assert all(p.channel == CHANNEL and p.thread_ts is None for p in made)
    assert shown["last_outcome"] == "posted" and sid in listing
    print(f"\n{listing}\n")
    print(one_run(slack, made[-1]))


def one_run(slack: FakeSlack, post: Post) -> str:
    """The Slack calls of the run that made `post`: the check of its channel before it
    fired, and the post itself, as the fake recorded them."""
    calls = slack.calls
    at = next(
        i
        for i, c in enumerate(calls)
        if c.method == "chat.postMessage" and post.text in str(c.params.get("text"))
    )
    check = max(i for i, c in enumerate(calls[:at]) if c.method == "conversations.info")
    return "\n".join(
        f"{c.method} {json.dumps(c.params, sort_keys=True)}" for c in (calls[check], calls[at])
    )
