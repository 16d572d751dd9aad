"""Socket Mode end to end: envelopes over a WebSocket, acked only once the turn is durable.

The gateway runs for real (bolt, gatekeeper, Postgres, task runner) against the loopback
Socket Mode server; a few tests drive `start_socket_mode` with a bare bolt app instead,
for what does not need a database (dropped sockets, refused tokens).
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from agent import ConfigError
from gateway.inbound.socket_mode import start_socket_mode
from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    app_mention_event,
    deliver,
    event_callback,
)
from tests.fakes.socket_mode import Ack, FakeSocketMode
from tests.gateway.process import run_cli
from tests.gateway.rig import APP_TOKEN, BOT_TOKEN, SECRET, Rig, gateway_env, socket_mode_env
from tests.logged import errors_logged
from tests.pg import create_database

pytestmark = pytest.mark.rig(modes=("socket",), users={DEFAULT_USER: "Ada"})


def task_id(event: dict[str, Any]) -> str:
    return f"T1:{event['channel']}:{event['ts']}"


async def test_mention_is_acked_after_its_task_is_stored_and_answered_once(rig: Rig) -> None:
    """A mention over Socket Mode is acked only once its task row exists; one threaded reply."""
    event = app_mention_event(text="<@UBOT> what is 2+2?")
    stored_at_ack: list[bool] = []

    async def check(ack: Ack) -> None:
        stored_at_ack.append(await task_count(rig, task_id(event)) == 1)

    rig.sockets.on_ack = check
    envelope_id = await rig.sockets.deliver(event_callback(event))
    ack = await rig.sockets.wait_for_ack(envelope_id)
    assert stored_at_ack == [True] and ack.payload is None
    posts = await rig.slack.wait_for_posts(1)
    assert [(p.channel, p.thread_ts) for p in posts] == [(DEFAULT_CHANNEL, event["ts"])]
    assert "what is 2+2?" in posts[0].text


async def test_socket_mode_serves_health_but_no_events_route(rig: Rig) -> None:
    """In Socket Mode /healthz and /readyz answer, /slack/events and /metrics are not on that
    port (metrics have their own listener), and the connection was opened through
    SLACK_API_URL."""
    base = f"http://127.0.0.1:{rig.gateway.port}"
    async with rig.http.get(f"{base}/healthz") as health, rig.http.get(f"{base}/readyz") as ready:
        assert (health.status, ready.status) == (200, 200)
    async with rig.http.get(f"{base}/metrics") as public, rig.http.get(rig.metrics_url) as private:
        assert (public.status, private.status) == (404, 200)
    status, _ = await deliver(rig.http, f"{base}/slack/events", event_callback({}), SECRET)
    assert status == 404
    assert len(rig.slack.calls_to("apps.connections.open")) == 1


async def test_failed_admission_is_not_acked_and_the_redelivery_is_answered(
    rig: Rig, postgres_dsn: str
) -> None:
    """With its database refusing connections a gateway does not ack; Slack's retry is answered."""
    dsn = await create_database(postgres_dsn, "socket_outage")
    # One worker: several workers reconnecting at once race in Database.identity (reported).
    replica = await rig.start_gateway(
        socket_mode=True, database_url=dsn, overrides={"THREADGATE_WORKERS": "1"}
    )
    [*_, link] = await rig.sockets.wait_for_connections(2)
    assert replica.port is not None
    event = event_callback(app_mention_event(text="<@UBOT> during the outage"))
    async with database_outage(postgres_dsn, dsn):
        with log_watch("gateway.inbound.socket_mode", "not acked") as refused:
            first = await rig.sockets.deliver(event, to=link)
            await asyncio.wait_for(refused.wait(), 10)
    retry = await rig.sockets.deliver(event, to=link, retry_attempt=1, retry_reason="timeout")
    await rig.sockets.wait_for_ack(retry)
    assert not rig.sockets.acked(first)
    posts = await rig.slack.wait_for_posts(1)
    assert "during the outage" in posts[0].text


async def test_same_event_over_http_and_socket_mode_is_answered_once(rig: Rig) -> None:
    """One event id delivered over HTTP to one replica and over Socket Mode to another: one reply."""
    http_gateway = await rig.start_gateway(socket_mode=False)
    envelope = event_callback(app_mention_event(text="<@UBOT> twice delivered"))
    url = f"http://127.0.0.1:{http_gateway.port}/slack/events"
    status, _ = await deliver(rig.http, url, envelope, SECRET)
    assert status == 200
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(envelope))
    await answered_once(rig, "twice delivered")


async def test_malformed_payloads_are_acked_refused_and_the_listener_goes_on(rig: Rig) -> None:
    """Envelopes bolt cannot read (a payload that is not an object; an event whose user or
    channel is not an id, or that is not an object; authorizations that are not a list; a
    message without its ts) are each acked, so Slack stops delivering them, store nothing
    and log no error; so is a redelivery; a frame that is not JSON is dropped without one.
    The next good envelope is answered."""
    good = event_callback(app_mention_event(text="<@UBOT> x"))
    event = good["event"]
    payloads: list[Any] = [
        [1, 2],
        "just text",
        None,
        {**good, "event": {**event, "user": 5}},
        {**good, "event": {**event, "channel": True}},
        {**good, "event": "app_mention"},
        {**good, "authorizations": {}},
        {**good, "event": {k: v for k, v in event.items() if k != "ts"}},
    ]
    tasks = await rig.count("tasks")
    with errors_logged() as errors:
        await rig.sockets.send_text("{not json")
        ids = [await rig.sockets.deliver(payload) for payload in payloads]
        for envelope_id in ids:
            await rig.sockets.wait_for_ack(envelope_id)
        again = await rig.sockets.deliver(payloads[3], envelope_id=ids[3], retry_attempt=1)
        await rig.sockets.wait_until(
            lambda: sum(a.envelope_id == again for a in rig.sockets.acks) == 2,
            what="the redelivery acked too",
        )
        await rig.sockets.wait_for_ack(
            await rig.sockets.deliver(event_callback(app_mention_event(text="<@UBOT> still here")))
        )
        await rig.slack.wait_until(
            lambda: any("still here" in p.text for p in rig.slack.posts), what="the answer"
        )
    assert await rig.count("tasks") == tasks + 1
    assert [r.getMessage() for r in errors] == []


async def test_disconnect_refresh_reconnects_and_the_next_event_is_answered(rig: Rig) -> None:
    """After a `disconnect` (refresh_requested) the gateway opens a new connection and answers."""
    [old] = rig.sockets.open_links
    await rig.sockets.disconnect(old, "refresh_requested")
    await rig.sockets.wait_until(
        lambda: not old.open and [k.number for k in rig.sockets.open_links] == [old.number + 1],
        what="the old connection replaced by a new one",
    )
    envelope_id = await rig.sockets.deliver(event_callback(app_mention_event(text="<@UBOT> hi")))
    ack = await rig.sockets.wait_for_ack(envelope_id)
    assert ack.link == old.number + 1
    await rig.slack.wait_for_posts(1)
    assert len(rig.slack.calls_to("apps.connections.open")) == 2


async def test_same_envelope_on_two_connections_is_answered_once(rig: Rig) -> None:
    """Two replicas each holding a connection get the same envelope: both ack, one reply."""
    await rig.start_gateway(socket_mode=True)
    links = await rig.sockets.wait_for_connections(2)
    envelope = event_callback(app_mention_event(text="<@UBOT> on both links"))
    envelope_id = await rig.sockets.deliver(envelope, to=links[0])
    await rig.sockets.deliver(envelope, to=links[1], envelope_id=envelope_id)
    await rig.sockets.wait_until(
        lambda: (
            {a.link for a in rig.sockets.acks if a.envelope_id == envelope_id}
            == {links[0].number, links[1].number}
        ),
        what="acks from both connections",
    )
    await answered_once(rig, "on both links")


async def test_dropped_connection_is_replaced_and_events_flow_again() -> None:
    """A connection cut without a close frame is replaced; the next envelope is handled and acked."""
    async with bare_socket_mode() as (sockets, seen):
        [old] = await sockets.wait_for_connections(1)
        sockets.drop(old)
        await sockets.wait_until(
            lambda: any(k.number > old.number for k in sockets.open_links), what="a new connection"
        )
        envelope_id = await sockets.deliver(event_callback(app_mention_event(text="<@UBOT> back")))
        await sockets.wait_for_ack(envelope_id)
        assert [e["event"]["text"] for e in seen] == ["<@UBOT> back"]


async def test_listener_failure_is_not_acked() -> None:
    """When the bolt listener raises, bolt answers 500 and the envelope is not acked."""
    async with bare_socket_mode(fail=True) as (sockets, _):
        await sockets.wait_for_connections(1)
        with log_watch("gateway.inbound.socket_mode", "not acked") as refused:
            envelope_id = await sockets.deliver(event_callback(app_mention_event(text="<@UBOT> x")))
            await asyncio.wait_for(refused.wait(), 10)
        assert not sockets.acked(envelope_id)


async def test_refused_app_token_is_a_config_error() -> None:
    """An app token Slack refuses stops start-up with a ConfigError naming SLACK_APP_TOKEN."""
    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as slack:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.url)
        bolt = AsyncApp(client=client, request_verification_enabled=False)
        with pytest.raises(ConfigError, match="SLACK_APP_TOKEN was refused by Slack"):
            await start_socket_mode(
                bolt, app_token="xapp-wrong", api_url=slack.url, connect_timeout=30
            )
        with pytest.raises(ConfigError, match="not_allowed_token_type"):
            await start_socket_mode(
                bolt, app_token=BOT_TOKEN, api_url=slack.url, connect_timeout=30
            )


async def test_readyz_follows_the_connection_down_and_back_up(rig: Rig) -> None:
    """Ready while connected; 503 once the link dropped and while the new one has not said
    hello; ready again after the hello."""
    ready_url = f"http://127.0.0.1:{rig.gateway.port}/readyz"
    assert await readyz(rig, ready_url) == 200
    rig.sockets.greet = False
    [old] = rig.sockets.open_links
    rig.sockets.drop(old)
    # slack_sdk's reconnect waits out its own ping interval and backoff first: a loaded
    # machine can take well past the default 10 s.
    await rig.sockets.wait_until(
        lambda: any(k.number > old.number for k in rig.sockets.open_links),
        60,
        what="a reconnect",
    )
    async with rig.http.get(ready_url) as response:
        assert response.status == 503
        assert "Socket Mode connection to Slack is down" in await response.text()
    await rig.sockets.hello(rig.sockets.open_links[-1])
    # Frames of one socket are read in order: once an envelope sent after the hello is
    # acked, the hello has been seen.
    envelope = event_callback(app_mention_event(text="<@UBOT> back"))
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(envelope))
    assert await readyz(rig, ready_url) == 200


async def readyz(rig: Rig, url: str) -> int:
    async with rig.http.get(url) as response:
        return response.status


async def test_a_connection_that_never_says_hello_ends_start_up_in_one_sentence() -> None:
    """A WebSocket that opens but never greets is given up after the connect timeout."""
    async with (
        FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as slack,
        FakeSocketMode() as sockets,
    ):
        slack.socket_mode, sockets.greet = sockets, False
        bolt = AsyncApp(
            client=AsyncWebClient(token=BOT_TOKEN, base_url=slack.url),
            request_verification_enabled=False,
        )
        with pytest.raises(ConfigError, match="no hello came over the WebSocket") as refused:
            await start_socket_mode(
                bolt, app_token=APP_TOKEN, api_url=slack.url, connect_timeout=0.5
            )
        assert "SLACK_APP_TOKEN" in str(refused.value)
        assert "THREADGATE_SOCKET_CONNECT_TIMEOUT" in str(refused.value)
        await sockets.wait_until(lambda: not sockets.open_links, what="the socket closed")


async def test_serve_with_a_refused_app_token_exits_naming_it(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """`threadgate serve` with an app token Slack refuses ends with one sentence, non-zero."""
    dsn = await create_database(postgres_dsn, "socket_refused")
    async with (
        FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as slack,
        OpenAIServer() as model,
        FakeSocketMode() as sockets,
    ):
        slack.socket_mode = sockets
        env = socket_mode_env(gateway_env(slack, model, dsn)) | {"SLACK_APP_TOKEN": "xapp-wrong"}
        status, err = await run_cli(["serve", "--port", "0"], env, tmp_path)
    assert status != 0
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("threadgate: SLACK_APP_TOKEN was refused by Slack (invalid_auth)")
    ), err


# -- helpers ---------------------------------------------------------------------------------


async def task_count(rig: Rig, task: str) -> int:
    return int(await rig.db.pool.fetchval("SELECT count(*) FROM tasks WHERE id = $1", task))


async def answered_once(rig: Rig, text: str) -> None:
    """One reply mentions `text`; a later event's reply proves no second one was on its way."""
    await rig.slack.wait_for_posts(1)
    later = app_mention_event(text="<@UBOT> and then", channel="C0SECOND01")
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(event_callback(later)))
    posts = await rig.slack.wait_for_posts(2)
    assert sum(text in p.text for p in posts) == 1


@asynccontextmanager
async def database_outage(server_dsn: str, dsn: str) -> AsyncIterator[None]:
    """The database refuses new connections and its open ones are cut; restored on exit."""
    name = urllib.parse.urlsplit(dsn).path.lstrip("/")
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
        )
        yield
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await admin.close()


@contextmanager
def log_watch(logger: str, needle: str) -> Iterator[asyncio.Event]:
    """An event set when `logger` emits a record containing `needle`."""
    seen = asyncio.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if needle in record.getMessage():
                seen.set()

    handler = Watch()
    logging.getLogger(logger).addHandler(handler)
    try:
        yield seen
    finally:
        logging.getLogger(logger).removeHandler(handler)


@asynccontextmanager
async def bare_socket_mode(
    *, fail: bool = False
) -> AsyncIterator[tuple[FakeSocketMode, list[dict[str, Any]]]]:
    """`start_socket_mode` feeding a bolt app with one recording listener (no database)."""
    seen: list[dict[str, Any]] = []
    async with (
        FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as slack,
        FakeSocketMode() as sockets,
    ):
        slack.socket_mode = sockets
        bolt = AsyncApp(
            client=AsyncWebClient(token=BOT_TOKEN, base_url=slack.url),
            process_before_response=True,
            request_verification_enabled=False,
        )

        @bolt.event("app_mention")
        async def on_mention(body: dict[str, Any]) -> None:
            if fail:
                raise RuntimeError("the database is down")
            seen.append(body)

        connection = await start_socket_mode(
            bolt, app_token=APP_TOKEN, api_url=slack.url, ping_interval=1, connect_timeout=30
        )
        try:
            yield sockets, seen
        finally:
            await connection.close()
