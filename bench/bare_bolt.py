"""The baseline app: bare slack-bolt on aiohttp, ack first, no storage, the same reply.

It runs as a child process of its own (like the gateway), so its CPU per event can be read
from /proc and compared with the gateway's, on the loop the gateway runs on by default
(uvloop where it is installed: gateway/process/event_loop.py), so the two compare like with like. `python -m bench.bare_bolt SLACK_URL` prints
`listening on http://127.0.0.1:PORT/slack/events` to stderr once it listens.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from tests.gateway.rig import BOT_TOKEN, SECRET

REPO = Path(__file__).resolve().parent.parent


def app(slack_url: str) -> web.Application:
    from gateway.slack.client import slack_client

    bolt = AsyncApp(client=slack_client(BOT_TOKEN, slack_url, timeout=15), signing_secret=SECRET)

    @bolt.event("app_mention")
    async def on_mention(event: dict[str, str], client: AsyncWebClient) -> None:
        thread = event.get("thread_ts") or event["ts"]
        await client.chat_postMessage(
            channel=event["channel"], thread_ts=thread, text=f"re: {event['text']}"
        )

    async def handle(request: web.Request) -> web.Response:
        return await to_aiohttp_response(await bolt.async_dispatch(await to_bolt_request(request)))

    web_app = web.Application()
    web_app.router.add_post("/slack/events", handle)
    return web_app


async def serve(slack_url: str) -> None:
    runner = web.AppRunner(app(slack_url), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print(f"listening on http://127.0.0.1:{port}/slack/events", file=sys.stderr, flush=True)
    await asyncio.Event().wait()


class BareBolt:
    """The baseline as a child process: `pid` for /proc, `events_url` for the load."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc, self.port = proc, port

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def events_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"


@asynccontextmanager
async def bare_bolt(slack_url: str) -> AsyncIterator[BareBolt]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.bare_bolt", slack_url,
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        if b"listening on" not in line:
            raise RuntimeError(f"bare bolt did not start: {line!r}")
        yield BareBolt(proc, int(line.rsplit(b":", 1)[1].split(b"/")[0]))
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


if __name__ == "__main__":
    from gateway.process.event_loop import loop_factory

    with asyncio.Runner(loop_factory=loop_factory("auto")) as runner:
        runner.run(serve(sys.argv[1]))
