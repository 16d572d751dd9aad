"""What the schedule tests share: a model that answers a schedule's turns, and readers of
the fake Slack's record by schedule and period.

A run's turn names its schedule and period (`<turn schedule="7" … at="…">`); the model
here answers it `digest 7 for <period>`, so each post says which period it ran for, and a
test can count the posts of each period."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from storage import Database
from tests.fakes.openai_api import RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack, Post
from tests.gateway.process import run_cli_output
from tests.gateway.rig import echo, last_user_text

_RUN = re.compile(r'<turn schedule="(?P<id>[^"]+)" by="[^"]*" channel="[^"]*" at="(?P<at>[^"]+)">')
_DIGEST = re.compile(r"digest (?P<id>\S+) for (?P<at>\S+)")

Model = Callable[[RecordedRequest], Reply]


def schedule_run(seen: RecordedRequest) -> re.Match[str] | None:
    """The schedule and period a model request runs for, when its turn is a schedule's."""
    return _RUN.search(last_user_text(seen.body))


def digest_model(fallback: Model = echo, *, silent: Callable[[str], bool] | None = None) -> Model:
    """Answers a schedule's run `digest ID for PERIOD` (or `no_reply` for the periods
    `silent` picks), anything else as `fallback` does."""

    def answer(seen: RecordedRequest) -> Reply:
        run = schedule_run(seen)
        if run is None:
            return fallback(seen)
        if silent is not None and silent(run["at"]):
            return reply_with_tool("no_reply", {"reason": "nothing new"})
        return reply_with_tool("final_reply", {"text": f"digest {run['id']} for {run['at']}"})

    return answer


def digests(slack: FakeSlack, schedule_id: str) -> list[Post]:
    """The posts of a schedule's runs, in the order they were made."""
    return [
        p
        for p in slack.posts
        if (m := _DIGEST.search(p.text)) is not None and m["id"] == schedule_id
    ]


def periods(posts: list[Post]) -> Counter[str]:
    """How many posts each period got."""
    return Counter(m["at"] for p in posts if (m := _DIGEST.search(p.text)) is not None)


async def cli(env: Mapping[str, str], cwd: Path, *args: str) -> str:
    """`threadgate ARGS`, which must succeed; its standard output."""
    status, out, err = await run_cli_output(list(args), env, cwd)
    assert status == 0, f"threadgate {' '.join(args)} exited {status}:\n{err}"
    return out


async def add_schedule(env: Mapping[str, str], cwd: Path, *args: str) -> dict[str, Any]:
    """`threadgate schedules add ARGS --json`: the stored schedule."""
    created: dict[str, Any] = json.loads(await cli(env, cwd, "schedules", "add", *args, "--json"))
    return created


async def runs_settled(db: Database, schedule_id: str, deadline: float = 60) -> None:
    """Wait until no run of the schedule is queued, running or waiting."""
    query = (
        "SELECT count(*) FROM tasks WHERE schedule_id = $1"
        " AND state IN ('queued', 'running', 'waiting')"
    )
    async with asyncio.timeout(deadline):
        while True:
            db.wakeup.clear()
            if await db.pool.fetchval(query, int(schedule_id)) == 0:
                return
            # NOTIFYs wake us on progress; a lease expiry is not announced, so look again soon.
            try:
                async with asyncio.timeout(0.5):
                    await db.wakeup.wait()
            except TimeoutError:
                pass
