"""A schedule on two replicas posts once per period, through a SIGKILL of one and its
restart (issue 34). At full scale (`make chaos`) it is the issue's scenario: a one-minute
schedule for three minutes; reduced, a two-second one for four periods.

Both replicas run the scheduler; whichever looks first fires each period, and the other
finds nothing to do. One is killed after the first post and started again after the
second; every period from the first post to the last has exactly one post, at the top of
the channel. And a gateway away for several periods runs the missed ones once when back."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path

from storage import get_schedule
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
    # What the closing note of issue 34 shows (visible with `pytest -s`).
    posts = "\n".join(f"{p.ts} {p.channel} thread={p.thread_ts} {p.text!r}" for p in made)
    print(f"\n{listing}\n\n{posts}\n\n{one_run(slack, made[-1])}")


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


async def test_periods_missed_while_no_gateway_ran_are_caught_up_by_one_run(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Killed, and away for several periods: back, the gateway runs the schedule once for
    all it missed (the latest of them), then once per period again."""
    dsn = await create_database(postgres_dsn, "chaos_schedules_down")
    processes = Processes(tmp_path)
    period = 2
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        Database(dsn, min_size=1, max_size=1) as db,
    ):
        model.default = digest_model()
        env = gateway_env(slack, model, dsn) | {"THREADGATE_SCHEDULE_MIN_PERIOD_SECONDS": "1"}
        try:
            gateway = await processes.start(env)
            sid = (
                await add_schedule(
                    env,
                    tmp_path,
                    "--team",
                    "T1",
                    "--channel",
                    CHANNEL,
                    "--every",
                    f"{period}s",
                    "--prompt",
                    "Catch up",
                )
            )["id"]
            await slack.wait_until(lambda: len(digests(slack, sid)) >= 1, 60, what="a post")
            await gateway.kill()
            before = (await get_schedule(db, sid)).last_run_at
            assert before is not None
            await until_past(db, before + timedelta(seconds=4 * period))
            await processes.start(env)
            await slack.wait_until(
                lambda: len([p for p in periods(digests(slack, sid)) if after(p, before)]) >= 2,
                60,
                what="two posts after the restart",
            )
            await cli(env, tmp_path, "schedules", "pause", sid)
            await runs_settled(db, sid)
        finally:
            await processes.stop_all()
    counted = periods(digests(slack, sid))
    assert set(counted.values()) == {1}, counted
    later = sorted(datetime.fromisoformat(p) for p in counted if after(p, before))
    # The first run after the restart is for a period at least three periods on: those
    # in between, missed while down, had no run of their own.
    assert later[0] - before >= timedelta(seconds=3 * period), (before, later)
    assert later[1] - later[0] == timedelta(seconds=period)


def after(period: str, moment: datetime) -> bool:
    return datetime.fromisoformat(period) > moment


async def until_past(db: Database, moment: datetime) -> None:
    """Wait until the database's clock is past `moment` (the gateway is down meanwhile:
    nothing happens that could be waited on instead)."""
    async with asyncio.timeout(60):
        while await db.pool.fetchval("SELECT now() <= $1", moment):  # noqa: ASYNC110
            await asyncio.sleep(0.2)
