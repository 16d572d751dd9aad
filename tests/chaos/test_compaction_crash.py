"""Crash mid-compaction: SIGKILL the gateway while the model is writing a thread's summary.

A thread that outgrows its window is summarized before the next answer
(agent/durable/compaction.py): a model request of its own, then the summary is stored,
then the round. Killed while that request is out, the task is taken over by a new
process, which summarizes again (the lost summary was never stored) and answers. The
thread must show exactly one reply to every message, in order; no two stored summaries
cover the same range; and the answers after the crash are written with a summary in the
window, not without one.

Each cycle runs in a thread of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import aiohttp

from storage import Database
from tests.chaos.harness import (
    Processes,
    answered,
    assert_exactly_once_in_order,
    conversations,
    deliver_until_acked,
    scaled,
    wait_until_settled,
)
from tests.fakes.openai_api import Completion, Held, OpenAIServer, RecordedRequest, Reply
from tests.fakes.slack_api import FakeSlack
from tests.gateway.rig import BOT_TOKEN, echo, gateway_env
from tests.pg import create_database

CYCLES = scaled(4, 1)
SUMMARY_PROMPT = b"You keep the memory of a long conversation"
SUMMARY = "Earlier in this thread: people asked things and were answered."
PAD = "filler " * 50
# A window small enough that the third or fourth message of a thread needs a summary.
SMALL = {"THREADGATE_HISTORY_CHARS": "1000", "THREADGATE_WORKERS": "2"}
MOST_MESSAGES = 12


async def first_of(*waits: Coroutine[Any, Any, Any]) -> int:
    """Wait for the first of `waits` to end (one at least must have a deadline); its
    position in `waits`."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        first = next(t for t in tasks if t in done)
        first.result()  # a wait that failed (its deadline passed) fails the test
        return tasks.index(first)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_summary_cut_by_a_crash_is_stored_once_and_every_message_answered_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    dsn = await create_database(postgres_dsn, "chaos_compaction")
    processes = Processes(tmp_path)
    threads = conversations(CYCLES, prefix="C0COMPACTKILL")
    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
    ):
        release = asyncio.Event()  # clear: the next summary request is held
        asked = asyncio.Event()  # a summary request is being held

        def answering(seen: RecordedRequest) -> Reply:
            if SUMMARY_PROMPT not in seen.raw:
                return echo(seen)
            if not release.is_set():
                asked.set()
                return Held(release, Completion(text=SUMMARY))
            return Completion(text=SUMMARY)

        model.default = answering
        try:
            for thread in threads:
                release.clear()
                asked.clear()
                web = await processes.start(gateway_env(slack, model, dsn) | SMALL)
                for _ in range(MOST_MESSAGES):
                    sent = thread.next_message(PAD)
                    await deliver_until_acked(http, lambda web=web: web.events_url, sent)
                    replied = slack.wait_until(answered(slack, [sent]), 60, what="a reply")
                    if await first_of(asked.wait(), replied) == 0:
                        break
                assert asked.is_set(), f"{MOST_MESSAGES} messages and no summary was asked for"
                await web.kill()
                release.set()  # the summary it asked for goes to a dead process
                await processes.start(gateway_env(slack, model, dsn) | SMALL)
                await slack.wait_until(answered(slack, thread.sent), 60, what="the reply")
                after = thread.next_message("after the crash ")
                await deliver_until_acked(http, lambda: processes.running[-1].events_url, after)
                await slack.wait_until(answered(slack, [after]), 60, what="the next reply")
                async with Database(dsn, min_size=1, max_size=1) as db:
                    await wait_until_settled(db)  # replied is not yet finished
                await processes.stop_all()
        finally:
            await processes.stop_all()
    async with Database(dsn, min_size=1, max_size=1) as db:
        stored = await db.pool.fetch(
            "SELECT session_id, covers_to_seq, text FROM summaries ORDER BY session_id"
        )
    assert_exactly_once_in_order(slack, [s for t in threads for s in t.sent])
    for thread in threads:
        session = f"T1:{thread.channel}:{thread.root}"
        mine = [row for row in stored if row["session_id"] == session]
        assert mine, f"{session}: no summary was stored"
        ends = [row["covers_to_seq"] for row in mine]
        assert len(ends) == len(set(ends)), f"{session}: two summaries of one range: {ends}"
        assert all(row["text"] == SUMMARY for row in mine)
        last = thread.sent[-1].marker
        [request] = [
            r for r in model.requests if last.encode() in r.raw and SUMMARY_PROMPT not in r.raw
        ]
        assert SUMMARY.encode() in request.raw, "the answer after the crash had no summary"
