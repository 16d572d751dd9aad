"""Shared machinery for the chaos scenarios: scale, a redelivering sender, and the checker.

Every scenario ends the same way: the fake Slack's record must show each sent event
answered exactly once, in its own thread, and within a thread in the order the messages
were sent. Events carry a unique marker (`q00001x`) in their text; the default `echo`
model quotes the user text, so a reply can be matched to its event by that marker.

Scale: `THREADGATE_CHAOS_SCALE=full` (`make chaos`) runs the long versions; the default,
`reduced`, keeps `make test` fast.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from storage.database import Database
from tests.fakes.openai_api import RecordedRequest
from tests.fakes.slack_api import FakeSlack, Post
from tests.fakes.slack_events import app_mention_event, deliver, event_callback, new_ts
from tests.gateway.process import GatewayProcess
from tests.gateway.rig import SECRET, last_user_text

FULL = os.environ.get("THREADGATE_CHAOS_SCALE", "reduced") == "full"

# Slack redelivers an unacknowledged event after a while; the chaos suite compresses that
# schedule to this pause between attempts (it paces retries, it synchronizes nothing).
REDELIVERY_PAUSE = 0.05

# The hourly message limits per user and per thread (issue 10's guard rails) are off in
# the scenarios that send more than the defaults from one test user: they are not about
# them, and tests/gateway/test_limits.py is.
NO_MESSAGE_LIMITS = {
    "THREADGATE_USER_MESSAGES_PER_HOUR": "0",
    "THREADGATE_THREAD_MESSAGES_PER_HOUR": "0",
}

MARKER = re.compile(r"q\d{5}x")
_markers = itertools.count(1)


def scaled(full: int, reduced: int) -> int:
    """`full` under `make chaos`, `reduced` in the normal test run."""
    return full if FULL else reduced


def new_marker() -> str:
    return f"q{next(_markers):05d}x"


def marker_of(seen: RecordedRequest) -> str | None:
    """The marker of the event a model request is about (its last user turn)."""
    match = MARKER.search(last_user_text(seen.body))
    return match.group(0) if match else None


@dataclass
class SentEvent:
    """One Slack message the scenario sent: its envelope, marker, thread and ack state."""

    envelope: dict[str, Any]
    marker: str
    attempts: int = 0
    acked: bool = False

    @property
    def event(self) -> dict[str, Any]:
        return dict(self.envelope["event"])

    @property
    def channel(self) -> str:
        return str(self.event["channel"])

    @property
    def thread_ts(self) -> str:
        return str(self.event.get("thread_ts") or self.event["ts"])

    @property
    def task_id(self) -> str:
        return f"T1:{self.channel}:{self.event['ts']}"


@dataclass
class Conversation:
    """A Slack thread the scenario writes into: the first message opens it."""

    channel: str
    root: str | None = None
    sent: list[SentEvent] = field(default_factory=list)

    def next_message(self, words: str = "") -> SentEvent:
        marker = new_marker()
        ts = new_ts()
        event = app_mention_event(
            text=f"<@UBOT> {words}{marker}", channel=self.channel, ts=ts, thread_ts=self.root
        )
        self.root = self.root or ts
        sent = SentEvent(event_callback(event), marker)
        self.sent.append(sent)
        return sent


def conversations(count: int, prefix: str = "C0CHAOS") -> list[Conversation]:
    """`count` threads, each in a channel of its own."""
    return [Conversation(f"{prefix}{n:03d}") for n in range(count)]


async def deliver_once(http: aiohttp.ClientSession, url: str, sent: SentEvent) -> bool:
    """One delivery (a redelivery after the first, with `X-Slack-Retry-Num`); True if acked.

    A refused connection or a cut one (the gateway died) counts as not acked.
    """
    retry = sent.attempts or None
    sent.attempts += 1
    try:
        status, _ = await deliver(http, url, sent.envelope, SECRET, retry_num=retry)
    except (aiohttp.ClientError, ConnectionError):
        return False
    if 200 <= status < 300:
        sent.acked = True
    return sent.acked


async def deliver_until_acked(
    http: aiohttp.ClientSession,
    url: Callable[[], str],
    sent: SentEvent,
    *,
    deadline: float = 60,
) -> None:
    """Deliver, then redeliver as Slack does, until the gateway answers 2xx."""
    async with asyncio.timeout(deadline):
        while not await deliver_once(http, url(), sent):  # noqa: ASYNC110 - Slack's retry pacing
            await asyncio.sleep(REDELIVERY_PAUSE)


def replies_in(slack: FakeSlack, channel: str, thread_ts: str, prefix: str = "re: ") -> list[Post]:
    return [
        p
        for p in slack.posts
        if p.channel == channel and p.thread_ts == thread_ts and p.text.startswith(prefix)
    ]


def answered(slack: FakeSlack, sent: Iterable[SentEvent]) -> Callable[[], bool]:
    """A predicate: every event has at least one reply in its thread."""
    events = list(sent)

    def check() -> bool:
        if len(slack.posts) < len(events):
            return False
        return all(
            any(s.marker in p.text for p in replies_in(slack, s.channel, s.thread_ts))
            for s in events
        )

    return check


async def wait_until_settled(db: Database, deadline: float = 60) -> None:
    """Wait until no task is queued, running or waiting (nothing more can be posted)."""
    query = "SELECT count(*) FROM tasks WHERE state IN ('queued', 'running', 'waiting')"
    async with asyncio.timeout(deadline):
        while True:
            db.wakeup.clear()
            if await db.pool.fetchval(query) == 0:
                return
            # NOTIFYs wake us on progress; a lease expiry is not announced, so look again soon.
            try:
                async with asyncio.timeout(0.5):
                    await db.wakeup.wait()
            except TimeoutError:
                pass


def assert_exactly_once_in_order(
    slack: FakeSlack, sent_events: Iterable[SentEvent], *, prefix: str = "re: "
) -> None:
    """Every sent event has exactly one reply (a post starting with `prefix` that quotes its
    marker) in its own thread; within a thread replies come in the order the messages were
    sent; and no reply answers something nobody sent."""
    events = list(sent_events)
    by_thread: dict[tuple[str, str], list[SentEvent]] = defaultdict(list)
    for sent in events:
        by_thread[(sent.channel, sent.thread_ts)].append(sent)
    problems: list[str] = []
    for (channel, thread_ts), in_thread in by_thread.items():
        posts = replies_in(slack, channel, thread_ts, prefix)
        order = [MARKER.findall(p.text) for p in posts]
        for sent in in_thread:
            count = sum(sent.marker in found for found in order)
            if count != 1:
                problems.append(f"{sent.marker} in {channel}/{thread_ts}: {count} replies")
        expected = [s.marker for s in in_thread]
        seen = [found[-1] if found else "?" for found in order]
        if seen != expected and not problems:
            problems.append(f"{channel}/{thread_ts}: replies in order {seen}, sent {expected}")
    known = {s.marker for s in events}
    for post in slack.posts:
        if post.text.startswith(prefix) and not set(MARKER.findall(post.text)) & known:
            problems.append(f"a reply nobody asked for: {post.text!r}")
    assert not problems, "\n".join(problems) + "\n" + slack.describe()


def answered_through(slack: FakeSlack, sent: Iterable[SentEvent]) -> Callable[[], bool]:
    """A predicate for threads that collect: the last message sent into each thread has a
    reply quoting it (replies come in order, so what came before is answered or covered)."""
    last: dict[tuple[str, str], SentEvent] = {}
    for s in sent:
        last[(s.channel, s.thread_ts)] = s

    def check() -> bool:
        return all(
            any(s.marker in p.text for p in replies_in(slack, s.channel, s.thread_ts))
            for s in last.values()
        )

    return check


def _replier(post: Post) -> str | None:
    """The task whose reply `post` is, from the outbox id its metadata names
    (`task:{id}:reply`, `#n` for a later part: gateway/delivery/posts.py)."""
    payload = (post.metadata or {}).get("event_payload") or {}
    outbox_id = str(payload.get("outbox_id") or "").partition("#")[0]
    if not (outbox_id.startswith("task:") and outbox_id.endswith(":reply")):
        return None
    return outbox_id.removeprefix("task:").removesuffix(":reply")


async def assert_each_answered_once(
    slack: FakeSlack, sent_events: Iterable[SentEvent], dsn: str, *, prefix: str = "re: "
) -> int:
    """The check of threads that collect (THREADGATE_THREAD_QUEUE=collect): every sent
    message is answered exactly once — its task posted exactly one reply, or it is covered
    by a task that posted exactly one reply, never both; each reply quotes the newest
    message it answers (the scenarios' models quote the last turn they were given, so a
    reply written without a message it answers shows); within a thread the replies follow
    the order of the newest message each answers; and no reply answers something nobody
    sent. Returns how many messages were covered by another's reply."""
    events = list(sent_events)
    async with Database(dsn, min_size=1, max_size=1) as db:
        rows = await db.pool.fetch(
            "SELECT id, covered_by, seq FROM tasks WHERE id = ANY($1::text[])",
            [s.task_id for s in events],
        )
    by_task = {s.task_id: s for s in events}
    covered_by = {r["id"]: r["covered_by"] for r in rows}
    newest: dict[str, tuple[int, str]] = {}  # each answering task: the seq and id it answers up to
    for r in sorted(rows, key=lambda r: r["seq"]):
        newest[r["covered_by"] or r["id"]] = (r["seq"], r["id"])
    replies: dict[str, list[Post]] = defaultdict(list)
    problems: list[str] = []
    for post in slack.posts:
        if not post.text.startswith(prefix):
            continue
        task = _replier(post)
        if task not in by_task:
            problems.append(f"a reply nobody asked for: {post.text!r} ({task})")
            continue
        replies[task].append(post)
    for sent in events:
        problems += _answer_problems(sent, covered_by, replies)
    for task, posts in replies.items():
        quoted = by_task[newest[task][1]].marker if task in newest else "?"
        if not all(quoted in p.text for p in posts):
            problems.append(f"the reply of {task} does not quote {quoted}: {posts[0].text!r}")
    problems += _order_problems(slack, events, replies, newest, prefix)
    assert not problems, "\n".join(problems) + "\n" + slack.describe()
    return sum(coverer is not None for coverer in covered_by.values())


def _answer_problems(
    sent: SentEvent, covered_by: Mapping[str, str | None], replies: Mapping[str, list[Post]]
) -> list[str]:
    """Why `sent` is not answered exactly once (nothing: it is)."""
    task = sent.task_id
    if task not in covered_by:
        return [f"{sent.marker} ({task}) was never admitted"]
    coverer, own = covered_by[task], len(replies.get(task, ()))
    if coverer is None:
        return [] if own == 1 else [f"{sent.marker}: {own} replies of its own"]
    problems = [f"{sent.marker}: covered by {coverer} and {own} replies of its own"] if own else []
    theirs = len(replies.get(coverer, ()))
    if theirs != 1:
        problems.append(f"{sent.marker}: covered by {coverer}, which posted {theirs} replies")
    return problems


def _order_problems(
    slack: FakeSlack,
    events: list[SentEvent],
    replies: Mapping[str, list[Post]],
    newest: Mapping[str, tuple[int, str]],
    prefix: str,
) -> list[str]:
    """Threads whose replies do not follow the order of the newest message each answers."""
    answering = {id(p): task for task, posts in replies.items() for p in posts}
    problems = []
    for channel, thread_ts in {(s.channel, s.thread_ts) for s in events}:
        posts = replies_in(slack, channel, thread_ts, prefix)
        seqs = [newest[answering[id(p)]][0] for p in posts if id(p) in answering]
        if seqs != sorted(seqs):
            problems.append(
                f"{channel}/{thread_ts}: replies out of order {[p.text for p in posts]}"
            )
    return problems


class Processes:
    """Gateway processes started by a scenario; `stop_all` stops whatever still runs."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.running: list[GatewayProcess] = []

    async def start(self, env: Mapping[str, str]) -> GatewayProcess:
        gateway = GatewayProcess(env, self.cwd)
        self.running.append(gateway)
        await gateway.start()
        return gateway

    async def stop_all(self) -> None:
        for gateway in self.running:
            if gateway.proc is not None and gateway.proc.returncode is None:
                await gateway.stop()


async def send_threads_in_order(
    threads: Iterable[Conversation],
    per_thread: int,
    send: Callable[[SentEvent], Awaitable[None]],
) -> list[SentEvent]:
    """Send `per_thread` messages into each thread: one after another within a thread (each
    acknowledged before the next is written), all threads at once."""

    async def one_thread(thread: Conversation) -> None:
        for _ in range(per_thread):
            await send(thread.next_message())

    chosen = list(threads)
    await asyncio.gather(*(one_thread(t) for t in chosen))
    return [s for t in chosen for s in t.sent]


async def converse(
    http: aiohttp.ClientSession,
    slack: FakeSlack,
    web: GatewayProcess,
    dsn: str,
    threads: list[Conversation],
    per_thread: int,
) -> list[SentEvent]:
    """Send `per_thread` messages in each thread to `web` (redelivering until acked), wait
    until every one has a reply and no task is left open; return what was sent."""

    async def send(sent: SentEvent) -> None:
        await deliver_until_acked(http, lambda: web.events_url, sent)

    sent = await send_threads_in_order(threads, per_thread, send)
    await slack.wait_until(answered(slack, sent), 120, what="every reply")
    async with Database(dsn, min_size=1, max_size=1) as db:
        await wait_until_settled(db)
    return sent
