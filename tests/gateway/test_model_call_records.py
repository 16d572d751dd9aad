"""Each model request is recorded cheaply: no httpx line per request at INFO, a line for
each request that failed, and httpx's own line back at DEBUG; the libraries that ask their
logger's level before making a debug line are told the real one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from slack_bolt.async_app import AsyncApp
from slack_bolt.logger import get_bolt_logger
from slack_sdk.web.async_client import AsyncWebClient

from gateway.telemetry.logs import LEVEL_ASKED, configure_logging
from tests.fakes.openai_api import OpenAIServer, error_reply
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import SECRET, echo, gateway_env
from tests.pg import create_database


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The root logger's handlers and level, and httpx's level, as they were."""
    root, named = logging.getLogger(), [logging.getLogger(n) for n in ("httpx", *LEVEL_ASKED)]
    handlers, level, levels = root.handlers[:], root.level, [n.level for n in named]
    yield
    root.handlers[:], root.level = handlers, level
    for logger, was in zip(named, levels, strict=True):
        logger.setLevel(was)


@pytest.mark.parametrize(("level", "shown"), [("INFO", False), ("WARNING", False), ("DEBUG", True)])
def test_httpx_request_lines_show_only_at_debug(
    restored_logging: None, level: str, shown: bool
) -> None:
    """httpx's INFO line per request is written at THREADGATE_LOG_LEVEL=DEBUG only."""
    configure_logging(level, "text")
    assert logging.getLogger("httpx").isEnabledFor(logging.INFO) is shown
    assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)


@pytest.mark.parametrize(("level", "asked"), [("INFO", logging.INFO), ("DEBUG", logging.NOTSET)])
def test_slack_sdk_and_bolt_make_debug_lines_only_at_debug(
    restored_logging: None, level: str, asked: int
) -> None:
    """slack_sdk's client and bolt's app, which format a debug line whenever their logger's
    own level is at most DEBUG, see INFO at INFO, and at DEBUG a level that lets every
    line through."""
    configure_logging(level, "text")
    asking = [AsyncWebClient().logger, get_bolt_logger(AsyncApp)]
    assert [logger.level <= logging.DEBUG for logger in asking] == [asked <= logging.DEBUG] * 2
    assert all(logger.isEnabledFor(logging.getLevelName(level)) for logger in asking)


async def test_a_gateway_at_info_logs_the_failed_model_request_and_no_httpx_line(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A real `threadgate serve` at INFO whose model answers 503 once, then the reply:
    one line says the request failed and which model, no line per HTTP request."""
    dsn = await create_database(postgres_dsn, "model_call_records")
    async with FakeSlack() as slack, OpenAIServer() as model, aiohttp.ClientSession() as http:
        model.script(error_reply(503, "overloaded", "server_error"))
        model.default = echo
        gateway = GatewayProcess(gateway_env(slack, model, dsn), tmp_path)
        await gateway.start()
        try:
            event = event_callback(app_mention_event(text="<@UBOT> are you there?"))
            assert (await deliver(http, gateway.events_url, event, SECRET))[0] == 200
            await slack.wait_for_posts(1)
            await gateway.wait_for_log(rb"model request to openai:gpt-test failed")
        finally:
            await gateway.stop()
    log = gateway.log.decode(errors="replace")
    assert len(model.requests) == 2
    assert log.count("model request to openai:gpt-test failed") == 1
    assert "HTTP Request:" not in log
