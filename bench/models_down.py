"""Benchmark: what a person sees while every model is down (issue 37, item 7).

A real `threadgate serve` child with both model slots (`THREADGATE_MODEL` and
`THREADGATE_FALLBACK_MODEL`) on a fake OpenAI that answers every request 503 without
`Retry-After`, every other setting at its default (streaming on). One mention is sent;
reported: when each post reached its thread and what it said, how many model requests
were made until the task ended and when each try began, and — with the model answering
again — how long the thread's next message took to be answered.

    .venv/bin/python -m bench.models_down [--code DIR]

`--code DIR` runs the gateway from a checkout of another commit (its working directory
comes first on its import path), for a before/after comparison.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench import run as bench_run
from bench.stack import NO_GUARD_RAILS, fakes, scratch_database, stop
from tests.fakes.openai_api import RecordedRequest, Reply, error_reply
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import SECRET, echo, gateway_env
from tests.pg import server_dsn

# Longer than the old bounds (30 minutes of deferrals) could keep a task.
DEADLINE = 40 * 60.0
TRY_GAP = 5.0
DEFAULTS = {"THREADGATE_STREAMING": "true", "THREADGATE_FALLBACK_MODEL": "openai:gpt-fallback"}


async def one(dsn: str, data: Path, code: Path | None) -> dict[str, Any]:
    asked: list[float] = []

    def down(seen: RecordedRequest) -> Reply:
        asked.append(time.perf_counter())
        return error_reply(503, "overloaded", "server_error")

    async with (
        fakes(down) as (slack, model),
        scratch_database(dsn, "bench_models_down") as url,
        aiohttp.ClientSession() as http,
    ):
        env = {**gateway_env(slack, model, url), **NO_GUARD_RAILS, **DEFAULTS}
        gw = GatewayProcess(env, code or data, forked=False)
        await gw.start()
        try:
            first = app_mention_event(text="<@UBOT> are you there?")
            sent = time.perf_counter()
            status, _ = await deliver(http, gw.events_url, event_callback(first), SECRET)
            assert status == 200
            thread = first["ts"]
            await slack.wait_until(lambda: _gave_up(slack, thread), DEADLINE, what="the give-up")
            timeline = {
                "posts": [
                    {"at_s": round(t - sent, 1), "text": p.text}
                    for t, p in zip(
                        slack.post_times[thread], _thread_posts(slack, thread), strict=True
                    )
                ],
                "model_requests": len(asked),
                "first_request_s": round(asked[0] - sent, 1) if asked else None,
                "last_request_s": round(asked[-1] - sent, 1) if asked else None,
                "tries_at_s": [round(t - sent, 1) for t in _try_starts(asked)],
            }
            print(timeline, flush=True)
            model.default = echo
            second = app_mention_event(text="<@UBOT> and now?", thread_ts=thread)
            again = time.perf_counter()
            await deliver(http, gw.events_url, event_callback(second), SECRET)
            await slack.wait_until(lambda: _answered(slack, thread), 120, what="the next reply")
            return timeline | {"next_message_answered_s": round(time.perf_counter() - again, 1)}
        finally:
            await stop(gw)


def _try_starts(asked: list[float]) -> list[float]:
    """When each try began: a request more than `TRY_GAP` after the one before starts one
    (within a try the ladder's waits between attempts are a few seconds at most)."""
    return [t for n, t in enumerate(asked) if n == 0 or t - asked[n - 1] > TRY_GAP]


def _thread_posts(slack: Any, thread: str) -> list[Any]:
    return [p for p in slack.posts if p.thread_ts == thread]


def _answered(slack: Any, thread: str) -> bool:
    """A reply in the thread: posted, or (streaming is on) a stream that was completed."""
    return any(p.text.startswith("re: ") for p in _thread_posts(slack, thread)) or any(
        s.thread_ts == thread and s.state == "stopped" for s in slack.streams
    )


def _gave_up(slack: Any, thread: str) -> bool:
    return any(p.text.startswith("Sorry") for p in _thread_posts(slack, thread))


async def main(code: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dsn = await server_dsn(Path(tmp))
        print(await one(dsn, Path(tmp), code))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, help="run the gateway from this checkout")
    bench_run(main(parser.parse_args().code))
