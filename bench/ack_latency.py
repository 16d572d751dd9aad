"""Benchmark: how long Slack waits for our ack, durability included.

A real gateway process (`threadgate serve`, with Slack and the model as loopback fakes in
this process, and a real Postgres: `DATABASE_URL` or the embedded server) receives 200
signed `app_mention` events one after another, each in its own thread; each ack comes only
after the turn and its task are committed, while the gateway's workers answer the earlier
ones. In the same run, a bare slack-bolt app on the same fakes — ack first, no
persistence — gives the baseline the figures are compared with.

    .venv/bin/python -m bench.ack_latency
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.openai_api import OpenAIServer
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import BOT_TOKEN, SECRET, echo, gateway_env
from tests.pg import create_database, server_dsn

EVENTS = 200


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(http: aiohttp.ClientSession, url: str) -> list[float]:
    latencies = []
    for n in range(EVENTS):
        envelope = event_callback(app_mention_event(text=f"<@UBOT> event {n}"))
        started = time.perf_counter()
        status, _ = await deliver(http, url, envelope, SECRET)
        latencies.append((time.perf_counter() - started) * 1000)
        assert status == 200, status
    return latencies


async def bare_bolt(slack_url: str) -> tuple[web.AppRunner, str]:
    """The baseline: bolt's own defaults (ack first, then work), no storage, same reply."""
    from gateway.slack_client import slack_client

    app = AsyncApp(client=slack_client(BOT_TOKEN, slack_url), signing_secret=SECRET)

    @app.event("app_mention")
    async def on_mention(event: dict[str, str], client: AsyncWebClient) -> None:
        thread = event.get("thread_ts") or event["ts"]
        await client.chat_postMessage(
            channel=event["channel"], thread_ts=thread, text=f"re: {event['text']}"
        )

    async def handle(request: web.Request) -> web.Response:
        return await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

    web_app = web.Application()
    web_app.router.add_post("/slack/events", handle)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"


def summary(name: str, samples: list[float]) -> str:
    return (
        f"{name}: p50 {statistics.median(samples):.2f} ms, p99 {percentile(samples, 0.99):.2f} ms"
        f" over {len(samples)} events"
    )


async def main() -> None:
    with tempfile.TemporaryDirectory() as data:
        dsn = await create_database(await server_dsn(Path(data)), "bench_ack")
        async with FakeSlack(bot_token=BOT_TOKEN) as slack, OpenAIServer() as model:
            slack.add_user("U0A1B2C3D4E", name="ada", display_name="Ada")
            model.default = echo
            gateway = GatewayProcess(gateway_env(slack, model, dsn), Path(data))
            await gateway.start()
            async with aiohttp.ClientSession() as http:
                try:
                    ours = await measure(http, gateway.events_url)
                    await slack.wait_for_posts(EVENTS, timeout=120)
                finally:
                    await gateway.stop()
                runner, url = await bare_bolt(slack.url)
                try:
                    base = await measure(http, url)
                    await slack.wait_for_posts(2 * EVENTS, timeout=120)
                finally:
                    await runner.cleanup()
    print(summary("threadgate ack", ours))
    print(summary("bare bolt ack ", base))
    print(
        f"ratio p50 {statistics.median(ours) / statistics.median(base):.2f}x, p99 {percentile(ours, 0.99) / percentile(base, 0.99):.2f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
