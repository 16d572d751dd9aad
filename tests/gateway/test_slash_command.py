"""The slash command end to end (issue 45, items 1 and 5): over HTTP and Socket Mode, every
subcommand is acked with an answer only the asker sees; `stop` stops the asker's running
task and nobody else's; a redelivered command acts once; the gates of messages apply.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest

from agent import recur_every
from gateway.inbound.slash_answers import WORKING
from storage import NewSchedule, create_schedule
from tests.fakes.openai_api import Gated, reply_with_tool
from tests.fakes.slack_commands import command_payload, deliver_command, send_command
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_DM,
    DEFAULT_TEAM,
    DEFAULT_USER,
    app_mention_event,
    dm_message_event,
    event_callback,
)
from tests.gateway.rig import BOTH, SECRET, Rig
from tests.pg import wait_for_task

pytestmark = pytest.mark.rig(modes=BOTH)
OTHER = "U0OTHER0001"


async def command(rig: Rig, payload: Mapping[str, str], *, envelope_id: str | None = None) -> Any:
    """Send the command the way the rig's gateway takes it; the answer its ack carried.
    Over Socket Mode an `envelope_id` already acked is delivered again (a retry)."""
    if not rig.socket_mode:
        status, kind, body = await send_command(rig.http, rig.events_url, payload, SECRET)
        assert status == 200, body
        assert kind == "application/json"
        return json.loads(body)
    acked = len(rig.sockets.acks)
    retry = 1 if envelope_id is not None and rig.sockets.acked(envelope_id) else 0
    sent = await deliver_command(rig.sockets, payload, envelope_id=envelope_id, retry_attempt=retry)
    await rig.sockets.wait_until(
        lambda: any(a.envelope_id == sent for a in rig.sockets.acks[acked:]),
        what=f"the ack of {sent}",
    )
    return next(a for a in rig.sockets.acks[acked:] if a.envelope_id == sent).payload


async def send_event(rig: Rig, event: Mapping[str, Any]) -> None:
    """Deliver a message event the way the rig's gateway takes events; acked."""
    if rig.socket_mode:
        await rig.sockets.wait_for_ack(await rig.sockets.deliver(event_callback(event)))
    else:
        assert (await rig.send(event_callback(event)))[0] == 200


def task_of(event: Mapping[str, Any]) -> str:
    return f"{DEFAULT_TEAM}:{event['channel']}:{event['ts']}"


@pytest.mark.parametrize("where", [DEFAULT_DM, DEFAULT_CHANNEL])
async def test_every_subcommand_is_acked_with_an_answer_only_the_asker_sees(
    rig: Rig, where: str
) -> None:
    """help, status, stop, new, usage, schedules, schedules delete and an unknown word:
    each is acked with an ephemeral answer saying what it did."""
    expected = {
        "": "/threadgate status",
        "help": "/threadgate status",
        "status": "Nothing of yours is working or waiting",
        "stop": "there was nothing to stop",
        "new": "already fresh" if where == DEFAULT_DM else "In a channel every mention",
        "usage": "Your usage today: 0 tokens, $0.00",
        "schedules": "You have no schedules.",
        "schedules delete 12": "You have no schedule #12",
        "frobnicate now": "I don't know `frobnicate now`",
    }
    for text, words in expected.items():
        answer = await command(rig, command_payload(text, channel=where))
        assert answer["response_type"] == "ephemeral", text
        assert words in answer["text"], (text, answer["text"])
    assert rig.slack.posts == [] and rig.slack.ephemerals == []


async def test_status_and_stop_act_on_the_askers_task_only(rig: Rig) -> None:
    """Two people's tasks work in one channel; the asker's `status` lists theirs, their
    `stop` stops it (with its note), and the other person's goes on to its answer."""
    release = asyncio.Event()
    held = Gated(reply_with_tool("final_reply", {"text": "the long answer"}), release, before=0)
    rig.model.script(held, held)
    mine = app_mention_event(text="<@UBOT> mine", user=DEFAULT_USER)
    theirs = app_mention_event(text="<@UBOT> theirs", user=OTHER)
    for n, event in enumerate((mine, theirs), start=1):
        await send_event(rig, event)
        await rig.model.wait_until(lambda n=n: len(rig.model.requests) >= n, what=f"request {n}")
    status = await command(rig, command_payload("status"))
    assert status["text"].count("working, asked") == 1, status["text"]
    stopped = await command(rig, command_payload("stop"))
    assert stopped["text"] == "Stopped 1 working task of yours in this channel."
    await wait_for_task(rig.db, task_of(mine), "cancelled")
    release.set()
    await wait_for_task(rig.db, task_of(theirs), "done")
    assert any("the long answer" in p.text for p in rig.slack.posts if p.thread_ts == theirs["ts"])
    assert any("Stopped" in p.text for p in rig.slack.posts if p.thread_ts == mine["ts"])
    actors = await rig.db.pool.fetch("SELECT task_id, actor, reason FROM task_interventions")
    assert [(a["task_id"], a["actor"], a["reason"]) for a in actors] == [
        (task_of(mine), f"slack:{DEFAULT_USER}", "/threadgate stop")
    ]


async def test_a_redelivered_command_acts_once(rig: Rig) -> None:
    """`new` delivered twice with one trigger id (an HTTP resend, a Socket Mode retry of
    the same envelope) clears the DM's conversation once; the second answer says so."""
    message = dm_message_event(text="remember the number 7")
    await send_event(rig, message)
    await wait_for_task(rig.db, f"{DEFAULT_TEAM}:{DEFAULT_DM}:{message['ts']}", "done")
    payload = command_payload("new", channel=DEFAULT_DM)
    first = await command(rig, payload, envelope_id="E0NEW00001")
    assert first["text"] == "Done: my next answer here starts a fresh conversation."
    again = await command(rig, payload, envelope_id="E0NEW00001")
    assert again["text"] == "Done already: this command reached me twice, and I acted on it once."
    clears = await rig.db.pool.fetchval(
        "SELECT count(*) FROM session_interventions WHERE action = 'clear'"
    )
    assert clears == 1
    assert await rig.count("messages") == 0


async def test_schedules_lists_and_deletes_only_the_askers(rig: Rig) -> None:
    """`schedules` lists the asker's with ids and not another person's; `schedules delete`
    of someone else's id deletes nothing, of their own deletes it."""
    mine = await create_schedule(rig.db, schedule_of(DEFAULT_USER, "post the standup notes"))
    theirs = await create_schedule(rig.db, schedule_of(OTHER, "their secret plan"))
    listed = (await command(rig, command_payload("schedules")))["text"]
    assert f"#{mine.id}" in listed and "post the standup notes" in listed
    assert f"#{theirs.id}" not in listed and "secret plan" not in listed
    refused = await command(rig, command_payload(f"schedules delete {theirs.id}"))
    assert refused["text"] == f"You have no schedule #{theirs.id}; nothing was deleted."
    deleted = await command(rig, command_payload(f"schedules delete {mine.id}"))
    assert deleted["text"] == f"Deleted your schedule #{mine.id}."
    assert await rig.count("schedules") == 1


@pytest.mark.rig(overrides={"THREADGATE_ALLOWED_USERS": OTHER}, modes=BOTH)
async def test_the_allowlist_refuses_a_command_as_it_would_a_message(rig: Rig) -> None:
    """Someone not on THREADGATE_ALLOWED_USERS is told so, privately, and nothing is read."""
    answer = await command(rig, command_payload("status"))
    assert answer == {
        "text": "Sorry, I'm not set up to take commands from you here.",
        "response_type": "ephemeral",
    }


async def test_a_channel_shared_with_another_organization_is_refused(rig: Rig) -> None:
    """Slack Connect is refused by default for commands too (the channel looked up)."""
    rig.slack.channels.share(DEFAULT_CHANNEL)
    answer = await command(rig, command_payload("status"))
    assert answer["text"] == "Sorry, I'm not set up to take commands from you here."


def schedule_of(user: str, prompt: str) -> NewSchedule:
    """A person's daily schedule in the default channel, as a conversation makes one."""
    return NewSchedule(
        team=DEFAULT_TEAM,
        target="channel",
        prompt=prompt,
        recurrence=recur_every("1d"),
        created_by=user,
        channel=DEFAULT_CHANNEL,
        owner=f"{DEFAULT_TEAM}:{user}",
    )


async def test_an_answer_not_ready_in_time_follows_through_the_response_url(rig: Rig) -> None:
    """A database too slow for the ack's budget: the ack says the answer follows, and it
    comes to the command's response_url, ephemeral, once the database answers."""
    url = rig.slack.responses.issue(DEFAULT_TEAM)
    async with rig.db.pool.acquire() as conn, conn.transaction():
        # Holds the asker's hourly count row: counting the command waits for it.
        await conn.execute(
            "INSERT INTO admission_counts (scope, key, window_start, messages) "
            "VALUES ('user', $1, date_trunc('hour', now(), 'UTC'), 0)",
            f"{DEFAULT_TEAM}:{DEFAULT_USER}",
        )
        answer = await command(rig, command_payload("status", response_url=url))
        assert answer == {"text": WORKING, "response_type": "ephemeral"}
        assert rig.slack.responses.answers == []
    await rig.slack.wait_until(lambda: bool(rig.slack.responses.answers), what="the late answer")
    [late] = rig.slack.responses.answers
    assert late.ephemeral and "Nothing of yours is working or waiting" in late.text


@pytest.mark.rig(overrides={"THREADGATE_USER_MESSAGES_PER_HOUR": "2"}, modes=BOTH)
async def test_commands_count_against_the_hourly_limit_except_stop(rig: Rig) -> None:
    """Past the asker's hourly message limit a command is refused politely; `stop` still
    works, as Slack's Stop button does."""
    for _ in range(2):
        assert "Nothing of yours" in (await command(rig, command_payload("status")))["text"]
    limited = await command(rig, command_payload("status"))
    assert limited["text"].startswith("Sorry, you've sent me more messages this hour")
    assert "nothing to stop" in (await command(rig, command_payload("stop")))["text"]


@pytest.mark.rig(modes=("http",))
async def test_a_malformed_command_is_refused_with_400(rig: Rig) -> None:
    """A command without its trigger id (or with a user id of no Slack shape) is 400."""
    for broken in ({"trigger_id": ""}, {"user_id": "not a user"}):
        payload = {**command_payload("status"), **broken}
        status, _, body = await send_command(rig.http, rig.events_url, payload, SECRET)
        assert status == 400 and "slash command" in body


@pytest.mark.rig(modes=("socket",))
async def test_a_malformed_slash_commands_envelope_is_acked_and_refused(rig: Rig) -> None:
    """Over Socket Mode a command we cannot read is acked (redelivering it would change
    nothing) without an answer, and nothing is acted on."""
    payload = {**command_payload("stop"), "trigger_id": ""}
    envelope = await deliver_command(rig.sockets, payload)
    ack = await rig.sockets.wait_for_ack(envelope)
    assert ack.payload is None
    assert await rig.count("task_interventions") == 0
