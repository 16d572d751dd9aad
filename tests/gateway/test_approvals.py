"""Approval before a tool acts, with real gateways: an MCP tool marked `requireApproval`
asks in the thread (approve and deny buttons), waits without a worker, and runs once when
the person who asked approves — over HTTP and Socket Mode, across a restart (a killed
gateway process), with two replicas, and until the time-out denies it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.slack.interactive import APPROVE, DENY
from storage import Database, approvals_of, tool_calls_of
from tests.fakes import WAIT_SECONDS
from tests.fakes.mcp_server import stdio_entry
from tests.fakes.openai_api import OpenAIServer, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import FakeSlack, Post
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    app_mention_event,
    deliver,
    deliver_interaction,
    event_callback,
)
from tests.gateway.process import GatewayProcess, run_cli_output
from tests.gateway.rig import BOT_TOKEN, BOTH, SECRET, Rig, gateway_env

APPROVER = "U0APPROVER1"
STRANGER = "U0STRANGER1"


def mcp_config(tmp_path: Path) -> Path:
    """One stdio MCP server whose `record` tool needs approval (and `echo` does not)."""
    entry = stdio_entry(
        tmp_path / "pid",
        env={"FAKE_MCP_CALLS": str(tmp_path / "calls")},
        allowedTools=["record", "echo"],
        requireApproval=["record"],
    )
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"fake": entry}}))
    return path


def settings(tmp_path: Path, **more: str) -> dict[str, str]:
    return {
        "THREADGATE_MCP_CONFIG": str(mcp_config(tmp_path)),
        "THREADGATE_APPROVERS": APPROVER,
        **more,
    }


def record_then_answer(seen: RecordedRequest) -> Reply:
    """The model: call `fake__record` first; once it has the result, say what it was."""
    results = [m["content"] for m in seen.body["messages"] if m.get("role") == "tool"]
    if not results:
        return reply_with_tool("fake__record", {"text": "deploy"}, call_id="call_rec")
    return reply_with_tool("final_reply", {"text": f"done; the tool said: {results[-1]}"})


def runs(tmp_path: Path) -> list[str]:
    """What the `record` tool recorded: one line per time it really ran."""
    calls = tmp_path / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


@asynccontextmanager
async def approval_rig(
    fresh_dsn: str, tmp_path: Path, mode: str, **more: str
) -> AsyncIterator[Rig]:
    async with Rig(
        fresh_dsn, socket_mode=mode == "socket", overrides=settings(tmp_path, **more)
    ) as rig:
        rig.model.default = record_then_answer
        if mode == "socket":
            await rig.sockets.wait_for_connections(1)
        yield rig


async def mention(rig: Rig, mode: str, text: str = "<@UBOT> deploy it") -> dict[str, Any]:
    event = app_mention_event(text=text)
    if mode == "socket":
        await rig.sockets.wait_for_ack(await rig.sockets.deliver(event_callback(event)))
    else:
        assert (await rig.send(event_callback(event)))[0] == 200
    return event


async def click(rig: Rig, mode: str, payload: dict[str, Any], url: str | None = None) -> None:
    """Deliver a click as Slack does in this mode; it is acked (HTTP 200, envelope ack)."""
    if mode == "socket":
        await rig.sockets.wait_for_ack(await rig.sockets.deliver_interactive(payload))
    else:
        status, body = await deliver_interaction(rig.http, url or rig.events_url, payload, SECRET)
        assert status == 200, body


def buttons(post: Post) -> dict[str, dict[str, Any]]:
    """The request's buttons by action id."""
    assert post.blocks is not None
    actions = [b for b in post.blocks if b["type"] == "actions"]
    return {e["action_id"]: e for block in actions for e in block["elements"]}


async def asked(slack: FakeSlack) -> Post:
    """The approval request, once posted."""
    await slack.wait_until(lambda: any(APPROVE in buttons(p) for p in slack.posts if p.blocks))
    return next(p for p in slack.posts if p.blocks and APPROVE in buttons(p))


async def task_state(db: Database) -> str:
    return str(await db.pool.fetchval("SELECT state FROM tasks"))


async def waiting(db: Database) -> None:
    """Until the task waits (the request is posted before the task is released)."""
    async with asyncio.timeout(WAIT_SECONDS):
        while await task_state(db) != "waiting":  # noqa: ASYNC110 - another process's row, polled
            await asyncio.sleep(0.02)  # polling a condition, under the deadline above


@pytest.mark.parametrize("mode", BOTH)
async def test_an_approved_call_runs_once_after_the_asker_approves(
    fresh_dsn: str, tmp_path: Path, mode: str
) -> None:
    """The request shows the call with a primary approve and a danger deny button; nothing
    runs while it waits (no worker holds the task); a stranger's click changes nothing and
    tells them privately; the asker's approval runs the tool once, the message shows who
    approved, and the thread gets the one reply that read the tool's result."""
    async with approval_rig(fresh_dsn, tmp_path, mode) as rig:
        event = await mention(rig, mode)
        request = await asked(rig.slack)
        assert request.thread_ts == event["ts"]
        found = buttons(request)
        assert (found[APPROVE]["style"], found[DENY]["style"]) == ("primary", "danger")
        assert found[APPROVE]["value"] == found[DENY]["value"]
        assert "fake__record" in request.text and f"<@{DEFAULT_USER}>" in json.dumps(request.blocks)
        await waiting(rig.db)
        assert runs(tmp_path) == []

        await click(rig, mode, rig.slack.click(DEFAULT_CHANNEL, request.ts, APPROVE, user=STRANGER))
        await rig.slack.wait_until(lambda: any(e.user == STRANGER for e in rig.slack.ephemerals))
        [note] = rig.slack.ephemerals
        assert (note.channel, note.thread_ts) == (DEFAULT_CHANNEL, event["ts"])
        assert "your click changed nothing" in note.text and f"<@{DEFAULT_USER}>" in note.text
        assert runs(tmp_path) == [] and await task_state(rig.db) == "waiting"

        await click(
            rig, mode, rig.slack.click(DEFAULT_CHANNEL, request.ts, APPROVE, user=DEFAULT_USER)
        )
        await rig.slack.wait_until(lambda: len(rig.slack.posts) >= 2, what="the reply")
        reply = rig.slack.posts[-1]
        assert "recorded deploy: 1 call(s)" in reply.text
        assert runs(tmp_path) == ["deploy"]
        shown = rig.slack.message(DEFAULT_CHANNEL, request.ts)
        assert all(b["type"] != "actions" for b in shown["blocks"])
        assert f"Approved by <@{DEFAULT_USER}>" in json.dumps(shown["blocks"], ensure_ascii=False)
        [stored] = await approvals_of(rig.db, f"T1:{DEFAULT_CHANNEL}:{event['ts']}")
        assert (stored.decision, stored.decided_by, stored.run_state) == (
            "approved",
            DEFAULT_USER,
            "ok",
        )
        calls = await tool_calls_of(rig.db, stored.id.split(":approval:")[0].removeprefix("task:"))
        assert [(c.name, c.state) for c in calls] == [("fake__record", "ok")]
        assert len(rig.slack.posts) == 2


@pytest.mark.parametrize("mode", BOTH)
async def test_a_denied_call_never_runs_and_the_model_is_told(
    fresh_dsn: str, tmp_path: Path, mode: str
) -> None:
    """An approver's deny: the tool never runs, the model reads that the person declined,
    the message shows who denied it, and the thread gets one reply."""
    async with approval_rig(fresh_dsn, tmp_path, mode) as rig:
        await mention(rig, mode)
        request = await asked(rig.slack)
        # A second screen still showing the buttons, clicked after the decision.
        late = rig.slack.click(DEFAULT_CHANNEL, request.ts, APPROVE, user=APPROVER)
        await click(rig, mode, rig.slack.click(DEFAULT_CHANNEL, request.ts, DENY, user=APPROVER))
        await rig.slack.wait_until(lambda: len(rig.slack.posts) >= 2, what="the reply")
        assert runs(tmp_path) == []
        told = [m for m in rig.model.requests[-1].body["messages"] if m.get("role") == "tool"]
        assert "declined" in told[-1]["content"]
        shown = rig.slack.message(DEFAULT_CHANNEL, request.ts)
        assert f"Denied by <@{APPROVER}>" in json.dumps(shown["blocks"], ensure_ascii=False)
        await click(rig, mode, late)
        await rig.slack.wait_until(lambda: len(rig.slack.ephemerals) == 1)
        assert "already decided (denied)" in rig.slack.ephemerals[0].text
        assert runs(tmp_path) == [] and len(rig.slack.posts) == 2


async def test_nobody_deciding_in_time_counts_as_denied(fresh_dsn: str, tmp_path: Path) -> None:
    """THREADGATE_APPROVAL_TIMEOUT_SECONDS ends the wait: found by a worker's claim, the
    tool does not run, the message says nobody decided, and the thread gets its reply."""
    async with approval_rig(
        fresh_dsn, tmp_path, "http", THREADGATE_APPROVAL_TIMEOUT_SECONDS="1"
    ) as rig:
        await mention(rig, "http")
        request = await asked(rig.slack)
        await rig.slack.wait_until(lambda: len(rig.slack.posts) >= 2, what="the reply")
        assert runs(tmp_path) == []
        told = [m for m in rig.model.requests[-1].body["messages"] if m.get("role") == "tool"]
        assert "nobody decided within the time" in told[-1]["content"]
        shown = rig.slack.message(DEFAULT_CHANNEL, request.ts)
        assert "Nobody decided in time" in json.dumps(shown["blocks"], ensure_ascii=False)


async def test_with_two_replicas_a_click_on_the_other_one_resumes_the_task(
    fresh_dsn: str, tmp_path: Path
) -> None:
    """The request is asked by one gateway (HTTP); the click reaches another (Socket Mode):
    the decision is in Postgres, any replica's worker continues the round, once."""
    async with approval_rig(fresh_dsn, tmp_path, "http") as rig:
        await rig.start_gateway(socket_mode=True, overrides=settings(tmp_path))
        await rig.sockets.wait_for_connections(1)
        await mention(rig, "http")
        request = await asked(rig.slack)
        await click(
            rig, "socket", rig.slack.click(DEFAULT_CHANNEL, request.ts, APPROVE, user=DEFAULT_USER)
        )
        await rig.slack.wait_until(lambda: len(rig.slack.posts) >= 2, what="the reply")
        assert runs(tmp_path) == ["deploy"]
        assert len([p for p in rig.slack.posts if p.blocks and APPROVE in buttons(p)]) == 1
        assert len(rig.slack.posts) == 2


async def test_a_waiting_request_survives_a_restart(postgres_dsn: str, tmp_path: Path) -> None:
    """The gateway process that asked is killed; a new one takes the click, and the task
    goes on from its pause: the tool runs once, one request and one reply in the thread."""
    from tests.pg import create_database

    dsn = await create_database(postgres_dsn, "approval_restart")
    async with FakeSlack(bot_token=BOT_TOKEN) as slack, OpenAIServer() as model:
        model.default = record_then_answer
        env = {**gateway_env(slack, model, dsn), **settings(tmp_path)}
        first = GatewayProcess(env, tmp_path)
        await first.start()
        import aiohttp

        async with aiohttp.ClientSession() as http:
            event = app_mention_event(text="<@UBOT> deploy it")
            assert (await deliver(http, first.events_url, event_callback(event), SECRET))[0] == 200
            request = await asked(slack)
            await first.kill()
            second = GatewayProcess(env, tmp_path)
            await second.start()
            try:
                payload = slack.click(DEFAULT_CHANNEL, request.ts, APPROVE, user=DEFAULT_USER)
                status, body = await deliver_interaction(http, second.events_url, payload, SECRET)
                assert status == 200, body
                await slack.wait_until(lambda: len(slack.posts) >= 2, what="the reply")
                assert runs(tmp_path) == ["deploy"]
                assert "recorded deploy: 1 call(s)" in slack.posts[-1].text
                task = f"T1:{DEFAULT_CHANNEL}:{event['ts']}"
                status, out, err = await run_cli_output(["tasks", "show", task], env, tmp_path)
                assert status == 0, err
                assert f"approved by {DEFAULT_USER}" in out and "fake__record" in out
            finally:
                await second.stop()
        assert len(slack.posts) == 2


def record_slowly_then_answer(seen: RecordedRequest) -> Reply:
    """As `record_then_answer`, with a call that takes a minute: its gateway dies in it."""
    results = [m["content"] for m in seen.body["messages"] if m.get("role") == "tool"]
    if not results:
        arguments = {"text": "deploy", "seconds": 60}
        return reply_with_tool("fake__record", arguments, call_id="call_rec")
    return reply_with_tool("final_reply", {"text": f"the tool: {results[-1]}"})


async def test_a_call_cut_off_by_a_crash_is_not_run_again(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Approved, started, and its gateway killed mid-call: the next gateway does not run
    it a second time; the model is told the outcome is unknown, and the thread gets one
    reply."""
    from tests.pg import create_database

    dsn = await create_database(postgres_dsn, "approval_crash_mid_call")
    async with FakeSlack(bot_token=BOT_TOKEN) as slack, OpenAIServer() as model:
        model.default = record_slowly_then_answer
        env = {**gateway_env(slack, model, dsn), **settings(tmp_path)}
        first = GatewayProcess(env, tmp_path)
        await first.start()
        import aiohttp

        async with aiohttp.ClientSession() as http:
            event = app_mention_event(text="<@UBOT> deploy it")
            assert (await deliver(http, first.events_url, event_callback(event), SECRET))[0] == 200
            request = await asked(slack)
            payload = slack.click(DEFAULT_CHANNEL, request.ts, APPROVE, user=DEFAULT_USER)
            assert (await deliver_interaction(http, first.events_url, payload, SECRET))[0] == 200
            async with asyncio.timeout(WAIT_SECONDS):
                while runs(tmp_path) != ["deploy"]:  # noqa: ASYNC110 - a child's file, polled
                    await asyncio.sleep(0.05)
            await first.kill()
            second = GatewayProcess(env, tmp_path)
            await second.start()
            try:
                await slack.wait_until(lambda: len(slack.posts) >= 2, what="the reply")
            finally:
                await second.stop()
        assert runs(tmp_path) == ["deploy"]
        told = [m for m in model.requests[-1].body["messages"] if m.get("role") == "tool"]
        assert "outcome is unknown" in told[-1]["content"]
        assert len(slack.posts) == 2
