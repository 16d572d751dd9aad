"""/metrics on a listener of its own (`THREADGATE_METRICS_ADDRESS`), never on the events port.

The events port faces the internet; metrics name the models, Slack's error codes and the
queue depth. `threadgate serve` says where it serves them, `off` turns them off, and a
wrong address ends the command with one sentence naming the variable.
"""

from __future__ import annotations

import socket
from pathlib import Path

import aiohttp
import pytest

from agent import ConfigError
from gateway.config.settings import Settings, load_settings, parse_address
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.gateway.process import GatewayProcess, run_cli
from tests.gateway.rig import BOT_TOKEN, Rig, gateway_env
from tests.pg import create_database

# What `serve` needs to get as far as opening its listeners; the database is unreachable.
COMPLETE = {
    "SLACK_BOT_TOKEN": "xoxb-1",
    "SLACK_SIGNING_SECRET": "s3cr3t-value",
    "THREADGATE_MODEL": "openai:gpt-test",
    "OPENAI_API_KEY": "sk-test",
    "DATABASE_URL": "postgresql://127.0.0.1:1/none",
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:9090", ("127.0.0.1", 9090)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("[::1]:9091", ("::1", 9091)),
        ("metrics.internal:9090", ("metrics.internal", 9090)),
        ("off", None),
        (" OFF ", None),
        ("", None),
    ],
)
def test_metrics_address_forms(value: str, expected: tuple[str, int] | None) -> None:
    """HOST:PORT, [v6]:PORT, or empty/off for no metrics listener at all."""
    assert load_settings(threadgate_metrics_address=value).telemetry.metrics_listen == expected


def test_metrics_are_on_loopback_by_default() -> None:
    """Unset, metrics are served on 127.0.0.1:9090: reachable from the host only."""
    default = Settings.field("THREADGATE_METRICS_ADDRESS").default
    assert parse_address(default) == ("127.0.0.1", 9090)


@pytest.mark.parametrize("value", ["9090", "::1:9090", "host:http", "127.0.0.1:70000", ":9090"])
def test_a_malformed_metrics_address_names_the_variable(value: str) -> None:
    """Each malformed value is a ConfigError naming THREADGATE_METRICS_ADDRESS."""
    with pytest.raises(ConfigError, match="THREADGATE_METRICS_ADDRESS"):
        load_settings(threadgate_metrics_address=value)


async def test_serve_with_a_malformed_metrics_address_is_one_sentence(tmp_path: Path) -> None:
    """`serve` exits 2 with one line that names the variable, without a traceback."""
    env = {**COMPLETE, "THREADGATE_METRICS_ADDRESS": "localhost"}
    status, stderr = await run_cli(["serve"], env, tmp_path)
    assert status == 2 and stderr.count("\n") == 1
    assert "THREADGATE_METRICS_ADDRESS" in stderr and "Traceback" not in stderr


async def test_serve_with_a_metrics_address_in_use_is_one_sentence(tmp_path: Path) -> None:
    """A metrics port another process listens on ends `serve` in one line naming the variable."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        env = {**COMPLETE, "THREADGATE_METRICS_ADDRESS": address}
        status, stderr = await run_cli(["serve"], env, tmp_path)
    assert status == 2 and stderr.count("\n") == 1, stderr
    assert "THREADGATE_METRICS_ADDRESS" in stderr and address in stderr
    assert "Traceback" not in stderr


async def test_serve_logs_where_metrics_are_served(postgres_dsn: str, tmp_path: Path) -> None:
    """`threadgate serve` names the metrics URL in its log; it serves them there, and the
    events port answers 404 for /metrics."""
    dsn = await create_database(postgres_dsn, "metrics_listener")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        gateway = GatewayProcess(gateway_env(slack, model, dsn), tmp_path)
        await gateway.start()
        try:
            assert gateway.metrics_url is not None, gateway.log.decode()
            async with http.get(gateway.metrics_url) as private:
                text = await private.text()
                assert private.status == 200 and "threadgate_events_total" in text
            # The pool's gauges read it when scraped: its size, and nobody waiting at rest.
            assert 'threadgate_db_pool_connections{state="max"} 20.0' in text
            assert "threadgate_db_pool_waiting 0.0" in text
            assert "threadgate_db_pool_wait_seconds_count 0.0" in text
            async with http.get(f"http://127.0.0.1:{gateway.port}/metrics") as public:
                assert public.status == 404
        finally:
            assert await gateway.stop() == 0


@pytest.mark.rig(overrides={"THREADGATE_METRICS_ADDRESS": "off"})
async def test_metrics_off_opens_no_listener(rig: Rig) -> None:
    """THREADGATE_METRICS_ADDRESS=off: no metrics port, and the gateway still serves."""
    assert rig.gateway.metrics_port is None
    async with rig.http.get(f"http://127.0.0.1:{rig.gateway.port}/healthz") as health:
        assert health.status == 200
