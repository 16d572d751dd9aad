"""Which event loop `threadgate` runs on: uvloop by default where it is installed, asyncio's
own when `THREADGATE_EVENT_LOOP=asyncio` (gateway/process/event_loop.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import uvloop

from gateway.process.event_loop import EventLoop, loop_factory, loop_name
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, gateway_env
from tests.pg import create_database


def test_auto_and_uvloop_make_uvloops_loop_and_asyncio_leaves_the_default() -> None:
    choices: tuple[EventLoop, ...] = ("auto", "uvloop")
    for choice in choices:
        factory = loop_factory(choice)
        assert factory is not None
        loop = factory()
        try:
            assert isinstance(loop, uvloop.Loop) and loop_name(loop) == "uvloop"
        finally:
            loop.close()
    assert loop_factory("asyncio") is None
    loop = asyncio.new_event_loop()
    try:
        assert loop_name(loop) == "asyncio"
    finally:
        loop.close()


@pytest.mark.parametrize("choice", ["auto", "asyncio"])
async def test_serve_runs_on_the_loop_its_setting_names_and_says_so(
    choice: str, postgres_dsn: str, tmp_path: Path
) -> None:
    """`serve` starts and its start-up line names the loop; it stops cleanly on it."""
    dsn = await create_database(postgres_dsn, f"event_loop_{choice}")
    async with FakeSlack(bot_token=BOT_TOKEN) as slack, OpenAIServer() as model:
        env = {**gateway_env(slack, model, dsn), "THREADGATE_EVENT_LOOP": choice}
        gateway = GatewayProcess(env, tmp_path)
        await gateway.start()
        try:
            expected = b"uvloop" if choice == "auto" else b"asyncio"
            await gateway.wait_for_log(b"event loop: " + expected)
        finally:
            assert await gateway.stop() == 0
