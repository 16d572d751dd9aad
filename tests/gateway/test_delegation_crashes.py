"""Delegation survives SIGKILL at its two delicate moments: exactly one ack, one reply."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from agent.rounds.subagent import SUBAGENT_PROMPT
from storage import Database
from tests.fakes.openai_api import Hang, OpenAIServer, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, SECRET, gateway_env
from tests.pg import create_database, wait_for_task

ACK = "On it."


def is_subagent(seen: RecordedRequest) -> bool:
    return seen.body["messages"][0]["content"] == SUBAGENT_PROMPT


def is_next_round(seen: RecordedRequest) -> bool:
    return not is_subagent(seen) and seen.body["messages"][-1]["role"] == "tool"


def model(seen: RecordedRequest) -> Reply:
    if is_subagent(seen):
        return reply_with_tool("final_reply", {"text": "sub finding"})
    if is_next_round(seen):
        return reply_with_tool("final_reply", {"text": "final answer"})
    subtasks = [{"type": "agent", "params": {"instructions": "look it up"}}]
    return reply_with_tool("delegate", {"acknowledgment": ACK, "subtasks": subtasks})


async def crash_when(
    postgres_dsn: str, tmp_path: Path, label: str, hang_on: str
) -> tuple[FakeSlack, list[RecordedRequest]]:
    """Run a delegating mention, SIGKILL the gateway when the model is asked `hang_on`,
    restart it, and return the fakes' records once the task is done."""
    dsn = await create_database(postgres_dsn, label)
    reached = asyncio.Event()
    hung = {"done": False}

    def scripted(seen: RecordedRequest) -> Reply:
        matches = is_subagent(seen) if hang_on == "subtask" else is_next_round(seen)
        if matches and not hung["done"]:
            hung["done"] = True
            reached.set()
            return Hang()
        return model(seen)

    slack = FakeSlack(bot_token=BOT_TOKEN)
    async with slack, OpenAIServer() as fake_model, aiohttp.ClientSession() as http:
        fake_model.default = scripted
        env = gateway_env(slack, fake_model, dsn) | {"THREADGATE_LEASE_SECONDS": "5"}
        first = GatewayProcess(env, tmp_path)
        await first.start()
        event = app_mention_event(text="<@UBOT> dig into this")
        assert (await deliver(http, first.events_url, event_callback(event), SECRET))[0] == 200
        await asyncio.wait_for(reached.wait(), 30)
        await first.kill()
        second = GatewayProcess(env, tmp_path)
        await second.start()
        try:
            async with Database(dsn, min_size=1, max_size=1) as db:
                await wait_for_task(db, f"T1:{event['channel']}:{event['ts']}", "done", deadline=60)
        finally:
            await second.stop()
    return slack, fake_model.requests


async def test_crash_while_a_subtask_runs(postgres_dsn: str, tmp_path: Path) -> None:
    """Killed after the ack, during the subtask: one ack, the subtask resumes, one reply."""
    slack, asked = await crash_when(postgres_dsn, tmp_path, "crash_subtask", hang_on="subtask")
    assert [p.text for p in slack.posts] == [ACK, "final answer"]
    assert [is_subagent(r) for r in asked] == [False, True, True, False]


async def test_crash_between_subtasks_and_the_next_round(postgres_dsn: str, tmp_path: Path) -> None:
    """Killed during round 1 after the subtasks ended: one ack, no re-run subtasks, one reply."""
    slack, asked = await crash_when(postgres_dsn, tmp_path, "crash_round1", hang_on="round1")
    assert [p.text for p in slack.posts] == [ACK, "final answer"]
    assert [is_subagent(r) for r in asked] == [False, True, False, False]
