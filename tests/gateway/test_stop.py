"""Slack's Stop button, end to end (issue 31, item 1): while a task works its thread's
agent session is `processing`; a Stop ends the work on whichever replica runs it (its
subtasks too), leaves the stopped stream as it stands, says once that the work was stopped,
takes the session out of `processing`, and the thread's next message is answered as usual.
Over HTTP and Socket Mode, with an ingress and a worker apart, and across a restart.

Each test records, as it goes, how long after the Stop the last model request started (a
negative time: before it) and the session's status changed; `-s` prints them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agent.rounds.subagent import SUBAGENT_PROMPT
from gateway.process.service import Gateway
from tests.fakes.openai_api import Gated, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import SessionChange
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_TEAM,
    agent_session_stopped_event,
    app_mention_event,
    event_callback,
)
from tests.gateway.rig import BOTH, STREAMING, Rig
from tests.pg import wait_for_task

ANSWER = "The first part of a long answer. And then a great deal more that nobody will read."
STOPPED = "Stopped."

pytestmark = pytest.mark.rig(
    overrides={**STREAMING, "THREADGATE_SLACK_SETTLE_SECONDS": "0.2"}, modes=BOTH
)
# The gateway that takes events runs no workers; tasks run on worker replicas beside it.
APART = {**STREAMING, "THREADGATE_SLACK_SETTLE_SECONDS": "0.2", "THREADGATE_ROLE": "ingress"}
WORKER = {"THREADGATE_ROLE": "worker"}


async def send(rig: Rig, envelope: dict[str, Any]) -> int:
    """Deliver the envelope the way the rig's gateway takes events; the ack's HTTP status."""
    if not rig.socket_mode:
        return (await rig.send(envelope))[0]
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(envelope))
    return 200


async def working(rig: Rig, event: dict[str, Any]) -> str:
    """Wait until the event's thread shows the task working: its session `processing` and
    its reply streaming; the stream's ts."""
    channel, thread = event["channel"], event["ts"]
    await rig.slack.wait_until(
        lambda: (
            rig.slack.session_status(channel, thread) == "processing"
            and any(s.thread_ts == thread and s.text for s in rig.slack.streams)
        ),
        what="a working session with streamed text",
    )
    return next(s.ts for s in rig.slack.streams if s.thread_ts == thread)


async def press_stop(rig: Rig, event: dict[str, Any]) -> float:
    """Press Stop in the event's thread and deliver Slack's event; when it was pressed."""
    channel, thread = event["channel"], event["ts"]
    streams = rig.slack.press_stop(channel, thread)
    pressed = time.monotonic()
    stop = agent_session_stopped_event(
        channel=channel, thread_ts=thread, streaming_message_ts=streams
    )
    assert await send(rig, event_callback(stop)) == 200
    return pressed


async def stopped_note(rig: Rig, event: dict[str, Any]) -> None:
    """Wait for the note and the session out of `processing`."""
    channel, thread = event["channel"], event["ts"]
    await rig.slack.wait_until(
        lambda: (
            any(STOPPED in p.text for p in rig.slack.posts if p.thread_ts == thread)
            and rig.slack.session_status(channel, thread) == "active"
        ),
        what="the stopped note and the session active",
    )


def record(name: str, pressed: float, requests: list[RecordedRequest], rig: Rig) -> None:
    """Print Stop → last model request started, and Stop → the session's status change."""
    last = max(r.at for r in requests) - pressed
    change: SessionChange = next(
        c for c in rig.slack.session_changes if c.at >= pressed and c.status != "processing"
    )
    print(
        f"\n[{name}] stop→last model request {last:+.3f} s, stop→status {change.at - pressed:.3f} s"
    )


def task_of(event: dict[str, Any]) -> str:
    return f"{DEFAULT_TEAM}:{event['channel']}:{event['ts']}"


async def next_message_is_answered(rig: Rig, event: dict[str, Any]) -> None:
    """The thread's next message is answered as usual (the default model echoes it)."""
    follow = app_mention_event(text="<@UBOT> and now this", thread_ts=event["ts"])
    assert await send(rig, event_callback(follow)) == 200
    await wait_for_task(rig.db, task_of(follow), "done")
    shown = rig.slack.visible_thread(event["channel"], event["ts"])
    assert any("and now this" in text for text in shown)


async def test_stop_ends_the_work_once_and_the_thread_goes_on(rig: Rig) -> None:
    """A Stop mid-stream: no model request after it, the stream stays as it stood (never
    the full answer), one note, the session `active`, the task cancelled; the next message
    is answered."""
    release = asyncio.Event()
    rig.model.script(Gated(reply_with_tool("final_reply", {"text": ANSWER}), release, before=14))
    event = app_mention_event(text="<@UBOT> tell me everything")
    await send(rig, event_callback(event))
    ts = await working(rig, event)
    pressed = await press_stop(rig, event)
    await stopped_note(rig, event)
    requests = list(rig.model.requests)
    await wait_for_task(rig.db, task_of(event), "cancelled")
    release.set()  # the cut request's answer, had anyone still been reading it
    await next_message_is_answered(rig, event)
    record("one gateway", pressed, requests, rig)
    assert all(r.at < pressed for r in requests)
    shown = rig.slack.stream(DEFAULT_CHANNEL, ts)
    assert shown.stopped_by == "user" and shown.text.replace("\u200d", "") != ANSWER
    assert len([p for p in rig.slack.posts if STOPPED in p.text]) == 1
    actions = await rig.db.pool.fetch(
        "SELECT action, actor FROM task_interventions WHERE task_id = $1", task_of(event)
    )
    assert [(a["action"], a["actor"]) for a in actions] == [("stop", "slack:U0A1B2C3D4E")]


async def test_a_stop_by_one_person_leaves_anothers_queued_message_answered(rig: Rig) -> None:
    """Anyone's Stop stops the working task, and the note names who pressed it; the
    presser's own queued message is cancelled with it, another person's stays queued and
    is answered."""
    asker, other, presser = "U0A1B2C3D4E", "U0OTHER0001", "U0PRESSER01"
    release = asyncio.Event()
    rig.model.script(Gated(reply_with_tool("final_reply", {"text": ANSWER}), release, before=14))
    event = app_mention_event(text="<@UBOT> tell me everything", user=asker)
    await send(rig, event_callback(event))
    await working(rig, event)
    queued = [
        app_mention_event(text=f"<@UBOT> a question from {who}", user=who, thread_ts=event["ts"])
        for who in (other, presser)
    ]
    for message in queued:
        assert await send(rig, event_callback(message)) == 200
        await wait_for_task(rig.db, task_of(message), "queued")
    streams = rig.slack.press_stop(event["channel"], event["ts"])
    stop = agent_session_stopped_event(
        channel=event["channel"], thread_ts=event["ts"], user=presser, streaming_message_ts=streams
    )
    assert await send(rig, event_callback(stop)) == 200
    await wait_for_task(rig.db, task_of(event), "cancelled")
    await wait_for_task(rig.db, task_of(queued[1]), "cancelled")
    await wait_for_task(rig.db, task_of(queued[0]), "done")
    release.set()
    notes = [p.text for p in rig.slack.posts if STOPPED in p.text]
    assert len(notes) == 1 and f"<@{presser}> pressed Stop" in notes[0]
    answered = await rig.db.pool.fetch(
        "SELECT id FROM outbox WHERE state = 'sent' AND id LIKE '%:reply'"
    )
    assert [r["id"] for r in answered] == [f"task:{task_of(queued[0])}:reply"]


def delegate_then_hold(release: asyncio.Event) -> Any:
    """The task delegates two sub-agent tasks whose model requests hang until `release`."""

    def answer(seen: RecordedRequest) -> Reply:
        if str(seen.body["messages"][0]["content"]) == SUBAGENT_PROMPT:
            return Gated(reply_with_tool("final_reply", {"text": "found"}), release, before=1)
        subtasks = [
            {"type": "agent", "params": {"instructions": "look one way"}},
            {"type": "agent", "params": {"instructions": "look the other"}},
        ]
        return reply_with_tool("delegate", {"acknowledgment": "Looking…", "subtasks": subtasks})

    return answer


async def test_stop_cuts_the_subtasks_that_run(rig: Rig) -> None:
    """A Stop while sub-agents work: they are cut (failed, no model request after the
    Stop), the task is cancelled and says so once."""
    release = asyncio.Event()
    rig.model.default = delegate_then_hold(release)
    event = app_mention_event(text="<@UBOT> research this")
    await send(rig, event_callback(event))
    # Two waits, so a failure says which of the two never came.
    await rig.model.wait_until(
        lambda: len(rig.model.requests) >= 3, what="both sub-agents asking the model"
    )
    await rig.slack.wait_until(
        lambda: rig.slack.session_status(event["channel"], event["ts"]) == "processing",
        what="the session processing while the sub-agents work",
    )
    pressed = await press_stop(rig, event)
    await stopped_note(rig, event)
    await wait_for_task(rig.db, task_of(event), "cancelled")
    requests = list(rig.model.requests)
    release.set()
    states = await rig.db.pool.fetch(
        "SELECT state FROM subtasks WHERE task_id = $1", task_of(event)
    )
    record("subtasks", pressed, requests, rig)
    assert [s["state"] for s in states] == ["failed", "failed"]
    assert all(r.at < pressed for r in requests)
    assert len([p for p in rig.slack.posts if STOPPED in p.text]) == 1


@pytest.mark.rig(overrides=APART, modes=BOTH)
async def test_stop_reaches_the_replica_that_runs_the_task(rig: Rig) -> None:
    """The Stop arrives at the ingress; the task runs on a worker replica, which stops it."""
    await rig.start_gateway(socket_mode=False, overrides=WORKER)
    release = asyncio.Event()
    rig.model.script(Gated(reply_with_tool("final_reply", {"text": ANSWER}), release, before=14))
    event = app_mention_event(text="<@UBOT> tell me everything")
    await send(rig, event_callback(event))
    await working(rig, event)
    pressed = await press_stop(rig, event)
    await stopped_note(rig, event)
    requests = list(rig.model.requests)
    await wait_for_task(rig.db, task_of(event), "cancelled")
    release.set()
    await next_message_is_answered(rig, event)
    record("two replicas", pressed, requests, rig)
    assert all(r.at < pressed for r in requests)
    assert len([p for p in rig.slack.posts if STOPPED in p.text]) == 1


@pytest.mark.rig(overrides=APART, modes=BOTH)
async def test_a_stop_while_its_worker_is_down_is_honoured_after_the_restart(rig: Rig) -> None:
    """The worker running the task goes down; the Stop pressed meanwhile is stored, and
    the worker started next says so once without asking the model, and the thread goes on."""
    first: Gateway = await rig.start_gateway(socket_mode=False, overrides=WORKER)
    release = asyncio.Event()
    rig.model.script(Gated(reply_with_tool("final_reply", {"text": ANSWER}), release, before=14))
    event = app_mention_event(text="<@UBOT> tell me everything")
    await send(rig, event_callback(event))
    await working(rig, event)
    await first.stop()
    pressed = await press_stop(rig, event)
    requests = list(rig.model.requests)
    await rig.start_gateway(socket_mode=False, overrides=WORKER)
    await stopped_note(rig, event)
    await wait_for_task(rig.db, task_of(event), "cancelled")
    release.set()
    await next_message_is_answered(rig, event)
    record("restart", pressed, requests, rig)
    assert all(r.at < pressed for r in requests) and len(requests) == 1
    assert len([p for p in rig.slack.posts if STOPPED in p.text]) == 1


@pytest.mark.rig(overrides=STREAMING)
async def test_a_malformed_stop_is_a_400_and_stops_nothing(rig: Rig) -> None:
    """An agent_session_stopped without its thread is refused with a 400, nothing stored."""
    event = agent_session_stopped_event(thread_ts="1.0")
    del event["thread_ts"]
    status, body = await rig.send(event_callback(event))
    assert status == 400 and "agent_session_stopped" in body
    assert await rig.count("task_interventions") == 0


# Each quick task sets its session at once, as a slow one does after the status delay.
@pytest.mark.rig(overrides={**STREAMING, "THREADGATE_STATUS_DELAY_SECONDS": "0"})
async def test_without_the_subscription_the_operator_is_told_once(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Slack's missing_agent_session_stopped_event_subscription warning is logged once, not
    per task; the tasks are answered all the same."""
    rig.slack.stop_subscribed = False
    for n in range(2):
        event = app_mention_event(text=f"<@UBOT> question {n}")
        await send(rig, event_callback(event))
        await wait_for_task(rig.db, task_of(event), "done")
    warned = [r for r in caplog.records if "agent_session_stopped" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelname == "WARNING"
