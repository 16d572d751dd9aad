"""`threadgate tasks`: operators list, show, retry and cancel tasks of running gateways,
through the real command (a child process) against the suite's Postgres."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
from hypothesis import given
from hypothesis import strategies as st

from gateway.operator.task_commands import one_line, parse_duration, printable, render_table
from storage import Database, TaskSummary
from tests.fakes.openai_api import (
    Held,
    OpenAIServer,
    RecordedRequest,
    Reply,
    error_reply,
    reply_with_tool,
)
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.process import GatewayProcess, run_cli_output
from tests.gateway.rig import BOT_TOKEN, SECRET, Rig, echo, gateway_env
from tests.pg import create_database, wait_for_task

FIRST_TS = "1700000001.000100"


def cli_env(database_url: str) -> dict[str, str]:
    """All `threadgate tasks` needs: where the database is."""
    return {"DATABASE_URL": database_url}


async def metric(http: aiohttp.ClientSession, url: str | None, sample: str) -> float:
    assert url is not None
    async with http.get(url) as response:
        text = await response.text()
    line = next((x for x in text.splitlines() if x.startswith(sample + " ")), f"{sample} 0")
    return float(line.split()[-1])


async def test_a_cancelled_running_task_posts_nothing_and_its_thread_goes_on(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The model is busy with the first message; the operator cancels its task; the model
    then answers, too late: nothing is posted for it, the thread's next message is answered,
    the gateway counts the task as cancelled and `tasks show` says who cancelled it."""
    dsn = await create_database(postgres_dsn, "tasks_cancel_running")
    release, called = asyncio.Event(), asyncio.Event()

    def held(seen: RecordedRequest) -> Reply:
        called.set()
        return Held(release, reply_with_tool("final_reply", {"text": "too late"}))

    async with (
        FakeSlack(bot_token=BOT_TOKEN) as slack,
        OpenAIServer() as model,
        aiohttp.ClientSession() as http,
        Database(dsn, min_size=1, max_size=2) as db,
    ):
        model.script(held)
        model.default = echo
        env = gateway_env(slack, model, dsn)
        gateway = GatewayProcess(env, tmp_path)
        await gateway.start()
        try:
            first = app_mention_event(text="<@UBOT> first", ts=FIRST_TS)
            assert (await deliver(http, gateway.events_url, event_callback(first), SECRET))[
                0
            ] == 200
            await asyncio.wait_for(called.wait(), 30)
            task_id = await db.pool.fetchval("SELECT id FROM tasks")
            status, out, err = await run_cli_output(
                ["tasks", "cancel", task_id, "--reason", "asked in the wrong channel"],
                cli_env(dsn),
                tmp_path,
            )
            assert status == 0 and out.strip().endswith(
                "its worker stops at its next heartbeat."
            ), err
            release.set()  # the model answers now; its worker finds its lease gone
            await gateway.wait_for_log(rb"cancelled by an operator or a Stop; stopped")
            second = app_mention_event(
                text="<@UBOT> second", ts="1700000002.000100", thread_ts=FIRST_TS
            )
            assert (await deliver(http, gateway.events_url, event_callback(second), SECRET))[
                0
            ] == 200
            [post] = await slack.wait_for_posts(1, timeout=30)
            assert "second" in post.text and post.thread_ts == FIRST_TS
            assert not any("too late" in p.text for p in slack.posts)
            cancelled = 'threadgate_tasks_total{outcome="cancelled"}'
            assert await metric(http, gateway.metrics_url, cancelled) == 1.0
            status, out, _ = await run_cli_output(
                ["tasks", "show", task_id], cli_env(dsn), tmp_path
            )
        finally:
            await gateway.stop()
    assert status == 0
    assert "state:          cancelled (cancelled by operator via threadgate tasks" in out
    assert "asked in the wrong channel" in out and "Operator actions" in out
    assert "too late" not in out.split("Posts to Slack")[1]  # no post of it, at all
    assert len(slack.posts) == 1


def refuse(seen: RecordedRequest) -> Reply:
    return error_reply(400, "This model does not exist", code="model_not_found")


async def mention(rig: Rig, text: str, ts: str) -> str:
    status, _ = await rig.send(event_callback(app_mention_event(text=f"<@UBOT> {text}", ts=ts)))
    assert status == 200
    task_id = await rig.db.pool.fetchval(
        "SELECT id FROM tasks WHERE address->>'thread_ts' = $1", ts
    )
    return str(task_id)


async def test_list_show_and_retry_done_failed_and_running_tasks(rig: Rig, tmp_path: Path) -> None:
    """A finished, a failed and a running task: list shows each (table and JSON, filtered),
    show says why one failed, retry answers it, and wrong requests get one sentence."""
    release, env = asyncio.Event(), cli_env(rig.database_url)
    done = await mention(rig, "fine", "1700000010.000100")
    await wait_for_task(rig.db, done, "done")
    rig.model.script(refuse)
    failed = await mention(rig, "doomed", "1700000020.000100")
    await wait_for_task(rig.db, failed, "failed")
    called = asyncio.Event()

    def held(seen: RecordedRequest) -> Reply:
        called.set()
        return Held(release, echo(seen))

    rig.model.script(held)
    running = await mention(rig, "slow", "1700000030.000100")
    await asyncio.wait_for(called.wait(), 30)  # its task is running: the model has it

    # The three reads change nothing, so they run at once (each is a `threadgate` start-up).
    (status, table, _), (_, listed, _), (shown, page, _) = await asyncio.gather(
        run_cli_output(["tasks", "list"], env, tmp_path),
        run_cli_output(["tasks", "list", "--state", "failed", "--json"], env, tmp_path),
        run_cli_output(["tasks", "show", failed], env, tmp_path),
    )
    assert status == 0
    header, *rows = table.splitlines()
    assert header.split()[:3] == ["ID", "STATE", "CHANNEL"]
    assert [r.split()[:2] for r in rows] == [
        [running, "running"],
        [failed, "failed"],
        [done, "done"],
    ]
    [only] = json.loads(listed)
    assert (only["id"], only["state"], only["team"]) == (failed, "failed", "T1")
    assert "model_not_found" in only["last_error"] or "does not exist" in only["last_error"]

    assert shown == 0 and "last error:" in page and "Turn and answers" in page
    assert f"task:{failed}:failure" in page  # the failure notice's outbox row, with its ts
    status, out, _ = await run_cli_output(["tasks", "retry", failed], env, tmp_path)
    assert (status, out.strip()) == (0, f"Task {failed} is queued again (it was failed).")
    release.set()
    await wait_for_task(rig.db, failed, "done")
    assert any("doomed" in p.text for p in rig.slack.posts)

    refusals = (
        (["tasks", "retry", done], f"Task {done} is done (answered); only a failed"),
        (["tasks", "cancel", done], f"Task {done} is already done (answered)"),
        (["tasks", "show", "T1:nope"], "No task has the id 'T1:nope'"),
    )
    # Each is refused without a change, so they too run at once.
    answers = await asyncio.gather(*(run_cli_output(a, env, tmp_path) for a, _ in refusals))
    for (_, sentence), (status, out, err) in zip(refusals, answers, strict=True):
        assert status == 1 and out == "" and err.startswith(f"threadgate: {sentence}"), err
        assert len(err.strip().splitlines()) == 1


@given(st.integers(0, 10_000), st.sampled_from("smhdw"))
def test_durations_read_as_written(n: int, unit: str) -> None:
    """`2h` is 7200 seconds, and so on for every unit."""
    sizes = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    assert parse_duration(f"{n}{unit}") == n * sizes[unit]
    assert parse_duration(f"{n}h{n}m") == n * 3600 + n * 60


@given(st.text())
def test_a_duration_is_parsed_or_refused_in_one_sentence(text: str) -> None:
    """Any text is a duration or an argparse error naming the forms, never a traceback."""
    import argparse

    try:
        assert parse_duration(text) >= 0
    except argparse.ArgumentTypeError as exc:
        assert "90s, 15m, 2h, 1d or 1h30m" in str(exc)


@given(st.text(), st.text())
def test_the_table_is_one_line_per_task_whatever_people_wrote(task_id: str, error: str) -> None:
    """Ids and errors with newlines or terminal escapes never break a row or reach the
    terminal raw."""
    now = datetime.now(UTC)
    task = TaskSummary(
        task_id, "failed", "T1", "C1", "1.0", None, 1, 0, now - timedelta(hours=3), now, error
    )
    table = render_table([task, task], now=now)
    assert len(table.splitlines()) == 3
    assert printable(table) == table
    assert "\x1b" not in table and "3h" in table


@given(st.text(), st.integers(1, 80))
def test_one_line_is_one_printable_line_within_its_width(text: str, width: int) -> None:
    """Whatever the text, the cell is one line, printable, at most `width` characters."""
    cell = one_line(text, width)
    assert "\n" not in cell and len(cell) <= width and printable(cell) == cell
