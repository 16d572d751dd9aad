"""End to end: a mention that makes the model delegate shows the ack, then the reply, once."""

from __future__ import annotations

import asyncio

from agent.rounds.subagent import SUBAGENT_PROMPT
from gateway.operator.task_commands import render_detail
from storage import inspect_task
from tests.fakes.openai_api import Held, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_events import app_mention_event, event_callback
from tests.gateway.rig import Rig
from tests.pg import wait_for_task

ACK = "Looking into both parts…"


def system_of(seen: RecordedRequest) -> str:
    return str(seen.body["messages"][0]["content"])


def delegating_model(seen: RecordedRequest) -> Reply:
    """Round 0 delegates two sub-agents; sub-agents answer; round 1 sums up their results."""
    messages = seen.body["messages"]
    if system_of(seen) == SUBAGENT_PROMPT:
        return reply_with_tool(
            "final_reply", {"text": f"finding for {messages[-1]['content'][-6:]}"}
        )
    if messages[-1]["role"] == "tool":
        return reply_with_tool("final_reply", {"text": f"summary of: {messages[-1]['content']}"})
    subtasks = [{"type": "agent", "params": {"instructions": f"part {n}"}} for n in (1, 2)]
    return reply_with_tool("delegate", {"acknowledgment": ACK, "subtasks": subtasks})


async def test_delegation_posts_the_ack_then_the_reply_each_once(rig: Rig) -> None:
    """delegate → ack in the thread → two sub-agents → next round → final reply."""
    rig.model.default = delegating_model
    event = app_mention_event(text="<@UBOT> research two things")
    assert (await rig.send(event_callback(event)))[0] == 200
    posts = await rig.slack.wait_for_posts(2)
    assert [p.thread_ts for p in posts] == [event["ts"], event["ts"]]
    assert posts[0].text == ACK
    assert "finding for part 1" in posts[1].text and "finding for part 2" in posts[1].text
    ids = [p.metadata["event_payload"]["outbox_id"] for p in posts]
    assert ids[0].endswith(":ack:0") and ids[1].endswith(":reply")
    task_id = f"T1:{event['channel']}:{event['ts']}"
    await wait_for_task(rig.db, task_id, "done")
    assert len(rig.slack.posts) == 2


async def test_each_subtask_records_the_epoch_its_sub_agent_was_asked_under(rig: Rig) -> None:
    """Both subtasks record the session's epoch (the one the reply was asked under, whose
    sub-agent prompt they were given), and `tasks show` prints it beside each."""
    rig.model.default = delegating_model
    event = app_mention_event(text="<@UBOT> research two things")
    await rig.send(event_callback(event))
    task_id = f"T1:{event['channel']}:{event['ts']}"
    await wait_for_task(rig.db, task_id, "done")
    detail = await inspect_task(rig.db, task_id)
    (epoch,) = detail.epochs
    stamped = [t.prompt_epoch for t in detail.rounds[0].subtasks]
    assert stamped == [epoch.hash, epoch.hash]
    reply = next(m for m in detail.messages if m.kind == "reply")
    assert reply.prompt_epoch == epoch.hash
    stored = "SELECT subagents->>'agent' FROM prompt_epochs WHERE hash = $1"
    assert await rig.db.pool.fetchval(stored, epoch.hash) == SUBAGENT_PROMPT
    assert render_detail(detail).count(f"prompt epoch #1 {epoch.hash[:12]}") == 4  # 2 + ack + reply


async def test_subtasks_run_in_parallel(rig: Rig) -> None:
    """Both sub-agents are in flight at once before either answers."""
    in_flight: list[RecordedRequest] = []
    both, release = asyncio.Event(), asyncio.Event()

    def model(seen: RecordedRequest) -> Reply:
        if system_of(seen) != SUBAGENT_PROMPT:
            return delegating_model(seen)
        in_flight.append(seen)
        if len(in_flight) == 2:
            both.set()
        return Held(release, delegating_model(seen))

    rig.model.default = model
    await rig.send(event_callback(app_mention_event(text="<@UBOT> in parallel please")))
    await asyncio.wait_for(both.wait(), 30)
    release.set()
    posts = await rig.slack.wait_for_posts(2)
    assert "finding for part 1" in posts[1].text and len(in_flight) == 2
