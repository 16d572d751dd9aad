"""A gateway killed mid-answer resumes the task on restart and replies exactly once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from storage import Database
from tests.fakes.openai_api import Hang, OpenAIServer, RecordedRequest, Reply
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, SECRET, echo, gateway_env
from tests.pg import create_database, wait_for_task


async def test_sigkill_while_the_model_answers_then_restart_gives_one_reply(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """SIGKILL during the model call; after restart the task resumes and is answered once."""
    # Empty: the first start applies every migration, as a new deployment's does.
    dsn = await create_database(postgres_dsn, "sigkill", empty=True)
    model_called = asyncio.Event()

    def hang_once(seen: RecordedRequest) -> Reply:
        model_called.set()
        return Hang()

    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.script(hang_once)
        model.default = echo
        env = gateway_env(slack, model, dsn)
        first = GatewayProcess(env, tmp_path)
        await first.start()
        event = app_mention_event(text="<@UBOT> survive this")
        status, _ = await deliver(http, first.events_url, event_callback(event), SECRET)
        assert status == 200
        await asyncio.wait_for(model_called.wait(), 30)
        await first.kill()
        assert slack.posts == []

        second = GatewayProcess(env, tmp_path)
        await second.start()
        try:
            posts = await slack.wait_for_posts(1, timeout=60)
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_for_task(db, f"T1:{event['channel']}:{event['ts']}", "done")
                stored = await everything_stored(db)
        finally:
            assert await second.stop() == 0  # SIGTERM: a clean, prompt shutdown
        assert len(slack.posts) == 1 and "survive this" in posts[0].text
        assert posts[0].thread_ts == event["ts"]
        logs = first.log.decode() + second.log.decode()
        for secret in (SECRET, BOT_TOKEN, env["OPENAI_API_KEY"]):
            assert secret not in logs and secret not in stored


async def everything_stored(db: Database) -> str:
    """Every text column of every table, for checking that no secret was written."""
    tables = ["seen_events", "sessions", "messages", "tasks", "outbox", "task_rounds", "subtasks"]
    dumps = [
        await db.pool.fetchval(f"SELECT coalesce(string_agg(t::text, ' '), '') FROM {t} t")
        for t in tables
    ]
    return " ".join(dumps)
