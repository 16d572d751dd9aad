"""Benchmark: a round in a 10,000-message thread costs what it costs in a 10-message thread.

Threads are seeded directly in Postgres (SQL, as the storage layer stores them: user turns
and replies, each reply anchored to its turn), then mentions are sent into each thread in
turn, waiting for each reply. Measured: event → reply latency, the bytes of the request
the model received, and the bytes of any summary request the round needed.

Compaction is on (the default), so a thread's window is its latest summary and the
messages after it, and what it shows depends on where the thread is in its compaction
cycle: right after a summary, half a window; just before the next, a whole one. Comparing
a thread just compacted with one about to be would measure that cycle, not the length of
the table. So the two threads of the target are seeded in the same state, the one every
thread that grew through the gateway is in: a summary (of the size the fake model writes)
covering all but the last `RECENT` messages, each `TEXT_CHARS` long. Their windows then
hold the same text, and the 10,000-message thread differs only in the rows behind it.

A third thread, `10000-backlog`, has 10,000 messages and no summary, as a thread stored
before compaction existed would: each round summarizes the next window's worth of its
backlog, oldest first (one extra bounded request per message until it has caught up). Its
figures say what that catching up costs; they are not the target's.

    .venv/bin/python -m bench.flat_cost
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from bench import loadgen
from bench import run as bench_run
from bench.loadgen import TimedSlack
from bench.stack import database_url, fakes, gateway
from tests.fakes.openai_api import Completion, OpenAIServer, RecordedRequest, Reply
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    app_mention_event,
    deliver,
    event_callback,
    new_ts,
)
from tests.gateway.rig import SECRET, echo
from tests.pg import server_dsn

# (name, messages, seeded with a summary of all but the last RECENT messages)
THREADS = (("10", 10, True), ("10000", 10_000, True), ("10000-backlog", 10_000, False))
TEXT_CHARS = 2_500
RECENT = 6
ROUNDS = 5
SUMMARY_PROMPT = b"You keep the memory of a long conversation"
SUMMARY = "The conversation so far: " + "y" * 2_000

_SEED = """
INSERT INTO messages (id, session_id, anchor, role, kind, text)
SELECT $1 || ':' || g, $1, 0,
       CASE WHEN g % 2 = 1 THEN 'user' ELSE 'assistant' END,
       CASE WHEN g % 2 = 1 THEN 'turn' ELSE 'reply' END,
       CASE WHEN g % 2 = 1 THEN '<turn from U0A1B2C3D4E>' ELSE '' END || repeat('x', $3)
FROM generate_series(1, $2) AS g ORDER BY g
"""
_ANCHOR = """
UPDATE messages SET anchor = CASE WHEN role = 'user' THEN seq ELSE seq - 1 END
WHERE session_id = $1
"""


# A summary of all but the last $2 messages, as compaction stores one.
_SUMMARIZE = """
INSERT INTO summaries (session_id, covers_from_seq, covers_to_seq, text)
SELECT $1, min(seq), max(seq), $3 FROM (
    SELECT seq FROM messages WHERE session_id = $1 ORDER BY seq
    LIMIT (SELECT count(*) FROM messages WHERE session_id = $1) - $2
) AS covered
"""


async def seed(dsn: str, size: int, summarized: bool) -> str:
    """A thread of `size` messages stored as if answered turn by turn, with a summary of
    all but the last `RECENT` if `summarized`; returns its root ts."""
    root = new_ts()
    session = f"T1:{DEFAULT_CHANNEL}:{root}"
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute("INSERT INTO sessions (id) VALUES ($1)", session)
            await conn.execute(_SEED, session, size, TEXT_CHARS)
            await conn.execute(_ANCHOR, session)
            if summarized:
                await conn.execute(_SUMMARIZE, session, RECENT, SUMMARY)
        await conn.execute("ANALYZE messages")
    finally:
        await conn.close()
    return root


async def one_round(
    url: str, slack: TimedSlack, model: OpenAIServer, root: str, n: int
) -> tuple[float, int, int]:
    """Mention into the thread, wait for the reply: (latency ms, request bytes to the model,
    bytes of the largest summary request the round needed, 0 if none)."""
    marker = f"flatmark{n}x{root}"
    before = slack.post_count[root]
    asked = len(model.requests)
    event = app_mention_event(text=f"<@UBOT> {marker}", thread_ts=root)
    async with loadgen.session() as http:
        sent = time.perf_counter()
        status, _ = await deliver(http, url, event_callback(event), SECRET)
    assert status == 200, status
    await slack.wait_until(lambda: slack.post_count[root] > before, 30, what="reply")
    latency = (slack.post_times[root][before] - sent) * 1000
    sizes = [len(r.raw) for r in model.requests if marker.encode() in r.raw]
    summaries = [len(r.raw) for r in model.requests[asked:] if SUMMARY_PROMPT in r.raw]
    return latency, max(sizes), max(summaries, default=0)


def summarizing(seen: RecordedRequest) -> Reply:
    """Echo, and a summary of a fixed size for compaction's requests."""
    if SUMMARY_PROMPT in seen.raw:
        return Completion(text=SUMMARY)
    return echo(seen)


async def run_all(dsn: str, data: Path) -> dict[str, Any]:
    async with fakes() as (slack, model), gateway(dsn, "flat", slack, model, data) as gw:
        model.default = summarizing
        roots = {name: await seed(database_url(gw), n, sm) for name, n, sm in THREADS}
        seen: dict[str, list[tuple[float, int, int]]] = {name: [] for name, _, _ in THREADS}
        await one_round(gw.events_url, slack, model, roots[THREADS[0][0]], -1)  # warm-up
        for n in range(ROUNDS):
            for name, _, _ in THREADS if n % 2 == 0 else reversed(THREADS):
                seen[name].append(await one_round(gw.events_url, slack, model, roots[name], n))
    figures = {
        name: {
            "messages": size,
            "summarized": summarized,
            "reply_ms": loadgen.median([lat for lat, _, _ in seen[name]]),
            "bytes": loadgen.median([float(b) for _, b, _ in seen[name]]),
            "max_bytes": max(b for _, b, _ in seen[name]),
            "summary_bytes": max(b for _, _, b in seen[name]),
        }
        for name, size, summarized in THREADS
    }
    return {"text_chars": TEXT_CHARS, "recent": RECENT, "rounds": ROUNDS, "threads": figures}


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print(await run_all(await server_dsn(Path(tmp)), Path(tmp)))


if __name__ == "__main__":
    bench_run(main())
