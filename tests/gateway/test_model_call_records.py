"""Each model request is recorded cheaply: no httpx line per request at INFO, a line for
each request that failed, and httpx's own line back at DEBUG."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from gateway.telemetry.logs import configure_logging
from tests.fakes.openai_api import OpenAIServer, error_reply
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import SECRET, echo, gateway_env
from tests.pg import create_database


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The root logger's handlers and level, and httpx's level, as they were."""
    root, httpx_log = logging.getLogger(), logging.getLogger("httpx")
    handlers, level, httpx_level = root.handlers[:], root.level, httpx_log.level
    yield
    root.handlers[:], root.level = handlers, level
    httpx_log.setLevel(httpx_level)


@pytest.mark.parametrize(("level", "shown"), [("INFO", False), ("WARNING", False), ("DEBUG", True)])
def test_httpx_request_lines_show_only_at_debug(
    restored_logging: None, level: str, shown: bool
) -> None:
    """httpx's INFO line per request is written at THREADGATE_LOG_LEVEL=DEBUG only."""
    configure_logging(level, "text")
    assert logging.getLogger("httpx").isEnabledFor(logging.INFO) is shown
    assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)


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
