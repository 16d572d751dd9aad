"""`threadgate doctor` on people's schedules: it counts them, and warns of those that slip
past today's bounds — never approved, too often for a person's, over a cap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent import recur_every
from gateway.slack.scopes import bot_scopes
from storage import Database, NewSchedule, create_schedule
from tests.fakes.openai_api import Completion, OpenAIServer, RecordedRequest, Reply
from tests.fakes.slack_api import FakeSlack
from tests.gateway.process import run_cli_output
from tests.gateway.rig import BOT_TOKEN, gateway_env
from tests.pg import create_database


def answer_ok(seen: RecordedRequest) -> Reply:
    return Completion(text="ok")


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeSlack, OpenAIServer]]:
    async with FakeSlack(bot_token=BOT_TOKEN) as slack, OpenAIServer() as model:
        slack.granted_scopes = list(bot_scopes(continue_threads=True))
        model.default = answer_ok
        yield slack, model


async def test_doctor_warns_of_peoples_schedules_past_todays_bounds(
    fakes: tuple[FakeSlack, OpenAIServer], postgres_dsn: str, tmp_path: Path
) -> None:
    """Three schedules of one person made before approvals (active, never approved), one
    of them every minute, with a cap of two: one counting line and three warnings, each
    naming what to do; none is a failure, so doctor still passes."""
    dsn = await create_database(postgres_dsn, "doctor_schedules")
    async with Database(dsn, min_size=1, max_size=1) as db:
        for every in ("1m", "2h", "3h"):
            new = NewSchedule(
                "T1", "channel", "digest", recur_every(every), "U1", channel="C1", owner="T1:U1"
            )
            await create_schedule(db, new)
        await create_schedule(
            db, NewSchedule("T1", "channel", "ops", recur_every("1m"), "operator", channel="C1")
        )
    env = gateway_env(*fakes, dsn) | {"THREADGATE_SCHEDULES_PER_PERSON": "2"}
    status, out, err = await run_cli_output(["doctor"], env, tmp_path)
    assert status == 0, out + err
    found = [line for line in out.splitlines() if " schedules: " in line]
    assert found[0].startswith("ok") and "3 active, 0 waiting" in found[0]
    warnings = [line for line in found if line.startswith("warn")]
    assert len(warnings) == 3, out
    assert "3 of people's active schedules were never approved" in warnings[0]
    assert "THREADGATE_PERSON_SCHEDULE_MIN_PERIOD_SECONDS" in warnings[1]
    assert "1 person(s) and 1 channel(s)" not in warnings[2]  # the channel's cap is 10
    assert "1 person(s) and 0 channel(s)" in warnings[2]
