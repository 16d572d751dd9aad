"""The open-loop load generator, and a fake Slack that notes when each reply lands.

`open_loop` sends signed events on a fixed schedule (`rate` per second) without waiting for
earlier acks, so a slow ack shows up as latency instead of quietly lowering the offered
rate (no coordinated omission). Each event opens its own thread; `TimedSlack` records,
per thread, when the first `chat.postMessage` arrived and how many posts it got, on the
same `perf_counter` clock as the sender.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp

from tests.fakes.slack_api import Body, FakeSlack, Params
from tests.fakes.slack_events import app_mention_event, event_callback, sign
from tests.gateway.rig import SECRET

EventFactory = Callable[[int], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Sample:
    """One event: its thread, when it was due and sent, when its ack came, with what status."""

    thread_ts: str
    due: float
    sent: float
    acked: float
    status: int

    @property
    def ack_ms(self) -> float:
        return (self.acked - self.sent) * 1000


class TimedSlack(FakeSlack):
    """FakeSlack that also notes the arrival time of the first post in each thread."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.first_post: dict[str, float] = {}
        self.post_count: Counter[str] = Counter()
        self.post_times: dict[str, list[float]] = {}

    def _chat_post_message(self, params: Params) -> Body:
        arrived = time.perf_counter()
        body = super()._chat_post_message(params)
        self._note(str(params.get("thread_ts") or ""), body, arrived)
        return body

    def _chat_stop_stream(self, params: Params) -> Body:
        """A streamed reply lands when its stream stops: it counts as that thread's post."""
        arrived = time.perf_counter()
        body = super()._chat_stop_stream(params)
        if body.get("ok"):
            stream = self.stream(str(params.get("channel")), str(params.get("ts")))
            self._note(stream.thread_ts, body, arrived)
        return body

    def _note(self, thread: str, body: Body, arrived: float) -> None:
        if body.get("ok") and thread:
            self.first_post.setdefault(thread, arrived)
            self.post_count[thread] += 1
            self.post_times.setdefault(thread, []).append(arrived)


def mention(n: int) -> dict[str, Any]:
    """A top-level mention: a new thread per event."""
    return app_mention_event(text=f"<@UBOT> load event {n}")


def signed_request(event: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """`event` in its envelope (a new event id), signed now. An event that is an envelope
    already (`type` event_callback, made by another process: bench/sender.py) keeps its id."""
    envelope = event if event.get("type") == "event_callback" else event_callback(event)
    body = json.dumps(envelope, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", **sign(body, SECRET, int(time.time()))}
    return body, headers


async def _send(http: aiohttp.ClientSession, url: str, event: dict[str, Any], due: float) -> Sample:
    body, headers = signed_request(event)
    event = event.get("event", event)
    sent = time.perf_counter()
    try:
        async with http.post(url, data=body, headers=headers) as response:
            await response.read()
            status = response.status
    except aiohttp.ClientError:
        status = 0
    return Sample(event["ts"], due, sent, time.perf_counter(), status)


def session() -> aiohttp.ClientSession:
    """An HTTP client without a connection cap (an open loop must never queue in the client)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))


@contextmanager
def no_pauses() -> Iterator[None]:
    """No garbage collection in this process while a load is measured. It holds the fake
    Slack, the fake model and the sender: a full collection here stopped all three for
    100-160 ms in the middle of bench/first_text.py's runs, and every answer and every
    timestamp the fakes took in flight came that much late, charged to the gateway. The
    gateway's own collections are part of what is measured and stay on; what the load
    leaves here is collected after it."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


async def open_loop(
    url: str, rate: float, count: int, factory: EventFactory = mention
) -> list[Sample]:
    """Send `count` events at `rate`/s on a fixed schedule; returns one sample per event."""
    events = [factory(n) for n in range(count)]
    async with session() as http:
        start = time.perf_counter() + 0.05
        pending = []
        for n, event in enumerate(events):
            due = start + n / rate
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            pending.append(asyncio.ensure_future(_send(http, url, event, due)))
        return list(await asyncio.gather(*pending))


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def sender_lag_ms(samples: list[Sample]) -> float:
    """The worst delay between an event's due time and its actual send (sender overload)."""
    return max((s.sent - s.due) * 1000 for s in samples)


def reply_ms(samples: list[Sample], slack: TimedSlack) -> list[float]:
    """Event sent → first post in its thread, for the events that got one."""
    return [
        (slack.first_post[s.thread_ts] - s.sent) * 1000
        for s in samples
        if s.thread_ts in slack.first_post
    ]


async def wait_answered(slack: TimedSlack, samples: list[Sample], deadline: float) -> bool:
    """Poll until every sampled thread has a post; False if `deadline` seconds pass first."""
    remaining = {s.thread_ts for s in samples}
    give_up = time.perf_counter() + deadline
    while remaining and time.perf_counter() < give_up:
        remaining = {t for t in remaining if t not in slack.first_post}
        await asyncio.sleep(0.02)
    return not remaining


def exactly_once(slack: TimedSlack, samples: list[Sample], posts_per_answer: int = 1) -> bool:
    return all(slack.post_count[s.thread_ts] == posts_per_answer for s in samples)


def median(values: list[float]) -> float:
    return statistics.median(values)


async def wait_answered_count(slack: TimedSlack, count: int, deadline: float) -> bool:
    """Wait until the fake has `count` thread posts in all; False if `deadline` passes first."""
    try:
        await slack.wait_until(
            lambda: sum(slack.post_count.values()) >= count, deadline, what=f"{count} posts"
        )
    except AssertionError:
        return False
    return True
