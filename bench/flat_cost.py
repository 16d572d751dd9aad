"""Benchmark: a round in a 10,000-message thread costs what it costs in a 10-message thread.

Two threads are seeded directly in Postgres (SQL, as the storage layer stores them: user
turns and replies, each reply anchored to its turn), then mentions are sent into each
thread in turn, waiting for each reply. Measured: event → reply latency and the bytes of
the request the model received. Seeded messages are `TEXT_CHARS` long so that the
10-message thread already fills the history window (`THREADGATE_HISTORY_CHARS`, 24,000 by
default): the comparison isolates what the *length of the table* costs, not the window
size. (With short messages the small thread would simply send fewer bytes — the window
is a cap, not a constant.)

Compaction is on (the default): what outgrows the window is summarized before a round,
so each thread also costs summary requests. The model answers them with a summary of a
fixed size; their bytes are reported as `summary_bytes` (the largest per thread), and
must not grow with the thread either: a summary request holds at most the history budget
of dropped messages and the previous summary. The seeded 10,000-message thread has a
backlog no summary ever covered: each message summarizes the next budget's worth of it,
oldest first (one extra bounded request per message until it has caught up); a thread that
grows message by message is compacted once per half a window of new conversation.

    .venv/bin/python -m bench.flat_cost
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from bench import loadgen
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

SIZES = (10, 10_000)
TEXT_CHARS = 2_500
ROUNDS = 5
SUMMARY_PROMPT = b"You keep the memory of a long conversation"

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


async def seed(dsn: str, size: int) -> str:
    """A thread of `size` messages stored as if answered turn by turn; returns its root ts."""
    root = new_ts()
    session = f"T1:{DEFAULT_CHANNEL}:{root}"
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute("INSERT INTO sessions (id) VALUES ($1)", session)
            await conn.execute(_SEED, session, size, TEXT_CHARS)
            await conn.execute(_ANCHOR, session)
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
        return Completion(text="The conversation so far: " + "y" * 2_000)
    return echo(seen)


async def run_all(dsn: str, data: Path) -> dict[str, Any]:
    async with fakes() as (slack, model), gateway(dsn, "flat", slack, model, data) as gw:
        model.default = summarizing
        roots = {size: await seed(database_url(gw), size) for size in SIZES}
        seen: dict[int, list[tuple[float, int, int]]] = {size: [] for size in SIZES}
        await one_round(gw.events_url, slack, model, roots[SIZES[0]], -1)  # warm-up
        for n in range(ROUNDS):
            for size in SIZES if n % 2 == 0 else reversed(SIZES):
                seen[size].append(await one_round(gw.events_url, slack, model, roots[size], n))
    figures = {
        size: {
            "reply_ms": loadgen.median([lat for lat, _, _ in rounds]),
            "bytes": loadgen.median([float(b) for _, b, _ in rounds]),
            "max_bytes": max(b for _, b, _ in rounds),
            "summary_bytes": max(b for _, _, b in rounds),
        }
        for size, rounds in seen.items()
    }
    return {"text_chars": TEXT_CHARS, "rounds": ROUNDS, "threads": figures}


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print(await run_all(await server_dsn(Path(tmp)), Path(tmp)))


if __name__ == "__main__":
    asyncio.run(main())
