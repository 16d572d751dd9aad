"""Messages that arrive while a thread's task works, in real gateway processes
(THREADGATE_THREAD_QUEUE, storage/thread_queue.py): collected into the next answer by
default, given to the running round under `steer`, restarting the work under `interrupt`;
and after a SIGKILL between collecting and answering, each is still answered once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from storage import Database
from tests.fakes.openai_api import Hang, Held, OpenAIServer, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, SECRET, echo, gateway_env
from tests.pg import create_database, wait_for_task


@dataclass
class Thread:
    """One Slack thread of a test: its root and what was sent into it."""

    http: aiohttp.ClientSession
    gateway: GatewayProcess
    root: dict[str, Any]

    async def send(self, text: str, *, user: str | None = None) -> str:
        """Post a reply into the thread; its task id once acked (stored)."""
        who = {"user": user} if user else {}
        event = app_mention_event(text=f"<@UBOT> {text}", thread_ts=self.root["ts"], **who)
        status, _ = await deliver(self.http, self.gateway.events_url, event_callback(event), SECRET)
        assert status == 200
        return task_id(event)


def task_id(event: Mapping[str, Any]) -> str:
    return f"T1:{event['channel']}:{event['ts']}"


def user_turns(seen: RecordedRequest) -> list[str]:
    """The user messages of a request, as the model received them."""
    return [m["content"] for m in seen.body["messages"] if m["role"] == "user"]


def arrived(event: asyncio.Event, then: Reply) -> Any:
    """A scripted reply that says when its request arrived."""

    def reply(seen: RecordedRequest) -> Reply:
        event.set()
        return then

    return reply


@asynccontextmanager
async def gateway(
    postgres_dsn: str, tmp_path: Path, name: str, mode: str | None
) -> AsyncIterator[tuple[FakeSlack, OpenAIServer, aiohttp.ClientSession, dict[str, str], str]]:
    """Fakes, a database and the env of a gateway in `mode` (None: the default)."""
    dsn = await create_database(postgres_dsn, name)
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        model.default = echo
        env = gateway_env(slack, model, dsn)
        del env["THREADGATE_THREAD_QUEUE"]
        if mode is not None:
            env["THREADGATE_THREAD_QUEUE"] = mode
        yield slack, model, http, env, dsn


async def open_thread(http: aiohttp.ClientSession, gateway: GatewayProcess, text: str) -> Thread:
    root = app_mention_event(text=f"<@UBOT> {text}")
    status, _ = await deliver(http, gateway.events_url, event_callback(root), SECRET)
    assert status == 200
    return Thread(http, gateway, root)


async def covered_by(db: Database, task: str) -> str | None:
    row = await db.pool.fetchrow("SELECT state, covered_by FROM tasks WHERE id = $1", task)
    assert row is not None and row["state"] == "covered"
    return str(row["covered_by"])


async def test_messages_sent_while_the_first_is_answered_get_one_reply_together(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """By default (collect): three messages while the first is answered give two replies,
    the second covering the third, whose request carries both as turns."""
    working, release = asyncio.Event(), asyncio.Event()
    async with gateway(postgres_dsn, tmp_path, "collect", None) as (slack, model, http, env, dsn):
        model.script(
            arrived(working, Held(release, reply_with_tool("final_reply", {"text": "one"})))
        )
        process = GatewayProcess(env, tmp_path)
        await process.start()
        try:
            thread = await open_thread(http, process, "hey")
            await asyncio.wait_for(working.wait(), 30)
            second = await thread.send("can you check the deploy?")
            third = await thread.send("oh, and the staging one too")
            release.set()
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_for_task(db, second, "done", deadline=60)
                assert await covered_by(db, third) == second
                assert (
                    await db.pool.fetchval("SELECT count(*) FROM tasks WHERE state = 'covered'")
                    == 1
                )
        finally:
            assert await process.stop() == 0
        assert [p.text for p in slack.posts] == ["one", slack.posts[1].text]
        assert len(slack.posts) == 2 and "staging" in slack.posts[1].text
        collected = user_turns(model.requests[-1])
        assert "check the deploy" in collected[-2] and "staging one too" in collected[-1]


async def test_under_steer_the_running_round_takes_the_new_message(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Under steer, a message sent while the round runs a tool reaches its next model call,
    and one reply answers both."""
    working, release = asyncio.Event(), asyncio.Event()
    async with gateway(postgres_dsn, tmp_path, "steer", "steer") as (slack, model, http, env, dsn):
        model.script(arrived(working, Held(release, reply_with_tool("current_time", {}))))
        process = GatewayProcess(env, tmp_path)
        await process.start()
        try:
            thread = await open_thread(http, process, "what time is the deploy?")
            first = task_id(thread.root)
            await asyncio.wait_for(working.wait(), 30)
            late = await thread.send("and in Tokyo?")
            release.set()
            posts = await slack.wait_for_posts(1, timeout=60)
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_for_task(db, first, "done", deadline=60)
                assert await covered_by(db, late) == first
        finally:
            assert await process.stop() == 0
        assert len(slack.posts) == 1 and "Tokyo" in posts[0].text
        second = model.requests[1].body["messages"]
        assert second[-2]["role"] == "tool" and "and in Tokyo?" in second[-1]["content"]
        assert 'source="steered"' in second[-1]["content"]


async def test_under_interrupt_the_askers_new_message_restarts_the_work(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Under interrupt, the asker's new message stops the first task's model call (counted
    and logged as `interrupted`, not as a lost lease); the task runs again and one reply
    covers both messages."""
    working = asyncio.Event()
    async with gateway(postgres_dsn, tmp_path, "interrupt", "interrupt") as (
        slack,
        model,
        http,
        env,
        dsn,
    ):
        model.script(arrived(working, Hang()))
        process = GatewayProcess(env, tmp_path)
        await process.start()
        try:
            thread = await open_thread(http, process, "summarise the incident")
            first = task_id(thread.root)
            await asyncio.wait_for(working.wait(), 30)
            correction = await thread.send("only the database part, please")
            posts = await slack.wait_for_posts(1, timeout=60)
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_for_task(db, first, "done", deadline=60)
                assert await covered_by(db, correction) == first
                action = await db.pool.fetchval(
                    "SELECT action FROM task_interventions WHERE task_id = $1", first
                )
                attempts = await db.pool.fetchval("SELECT attempts FROM tasks WHERE id = $1", first)
            await process.wait_for_log(rb"task interrupted: its asker wrote again")
            assert process.metrics_url is not None
            async with http.get(process.metrics_url) as response:
                metrics = await response.text()
        finally:
            assert await process.stop() == 0
        assert action == "interrupt" and attempts == 2
        assert 'threadgate_tasks_total{outcome="interrupted"} 1.0' in metrics
        assert 'outcome="lease_lost"' not in metrics
        assert len(slack.posts) == 1 and "database part" in posts[0].text
        turns = user_turns(model.requests[-1])
        assert "summarise the incident" in turns[-2] and "database part" in turns[-1]


async def test_a_sigkill_between_collecting_and_answering_loses_and_doubles_nothing(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The task that covered two messages is killed mid-answer; after restart it answers
    both once: two replies in all, none twice, none missing."""
    first_called, covering_called, release = asyncio.Event(), asyncio.Event(), asyncio.Event()
    async with gateway(postgres_dsn, tmp_path, "collect_kill", "collect") as (
        slack,
        model,
        http,
        env,
        dsn,
    ):
        model.script(
            arrived(first_called, Held(release, reply_with_tool("final_reply", {"text": "one"}))),
            arrived(covering_called, Hang()),
        )
        doomed = GatewayProcess(env, tmp_path)
        await doomed.start()
        thread = await open_thread(http, doomed, "hey")
        await asyncio.wait_for(first_called.wait(), 30)
        second = await thread.send("check the deploy")
        third = await thread.send("and staging")
        release.set()
        await asyncio.wait_for(covering_called.wait(), 30)
        await doomed.kill()
        async with Database(dsn, min_size=1, max_size=1) as db:
            assert await covered_by(db, third) == second  # collected, not answered
            assert len(slack.posts) == 1
            restarted = GatewayProcess(env, tmp_path)
            await restarted.start()
            try:
                await wait_for_task(db, second, "done", deadline=60)
                assert await covered_by(db, third) == second
            finally:
                assert await restarted.stop() == 0
        assert len(slack.posts) == 2 and "and staging" in slack.posts[1].text
        turns = user_turns(model.requests[-1])
        assert "check the deploy" in turns[-2] and "and staging" in turns[-1]
