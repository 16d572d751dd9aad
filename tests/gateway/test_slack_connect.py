"""Slack Connect through the whole gateway: a channel shared with another organization is
refused unless the operator opted in (no model call, one notice), its sharing looked up
when the event does not say and refused when it cannot be checked; an allowed one is
answered, its authors of other organizations marked in their turns."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.inbound.channel_rules import REFUSAL_NOTICES
from gateway.process.channel_policies import EXTERNAL_NOTE
from gateway.text.provenance import parse_turn
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_TEAM,
    app_mention_event,
    event_callback,
)
from tests.gateway.rig import BOTH, Rig
from tests.pg import wait_for_task

CONNECT = "C0CONNECT01"
pytestmark = pytest.mark.rig(modes=BOTH)


async def send(rig: Rig, envelope: dict[str, Any]) -> int:
    """Deliver the envelope the way the rig's gateway takes events; the ack's HTTP status."""
    if not rig.socket_mode:
        return (await rig.send(envelope))[0]
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(envelope))
    return 200


def from_partner(text: str, **fields: Any) -> dict[str, Any]:
    """A mention in the Connect channel by someone of the other organization's T9."""
    event = app_mention_event(text=f"<@UBOT> {text}", user="UPARTNER1", channel=CONNECT, **fields)
    event["user_team"] = event["source_team"] = "T9"
    return event


async def answer_elsewhere(rig: Rig, posts_before: int) -> None:
    """A mention in an internal channel, answered: everything sent before it was handled."""
    await send(rig, event_callback(app_mention_event(text="<@UBOT> ping")))
    await rig.slack.wait_for_posts(posts_before + 1)


def unlabelled(text: str) -> str:
    """A user message as the model reads it, without its `[ref N] ` label."""
    return re.sub(r"^\[ref \d+\] ", "", text)


async def metrics(rig: Rig) -> str:
    async with rig.http.get(rig.metrics_url) as response:
        return await response.text()


async def test_a_slack_connect_message_costs_no_model_call_and_gets_one_notice(rig: Rig) -> None:
    """A mention in a channel the envelope says is shared, its redelivery and a second
    mention in its thread: one notice in the thread, no model request, no files read."""
    file = rig.slack.files.add_file("accounts.txt", b"internal numbers")
    first = from_partner("what do you know about our account?")
    first |= {"subtype": "file_share", "files": [file]}
    envelope = event_callback(first, ext_shared=True)
    assert await send(rig, envelope) == 200
    assert await send(rig, envelope) == 200  # redelivered
    again = from_partner("hello?", thread_ts=first["ts"])
    assert await send(rig, event_callback(again, ext_shared=True)) == 200
    await answer_elsewhere(rig, 1)
    notices = [p for p in rig.slack.posts if p.channel == CONNECT]
    assert [(p.thread_ts, p.text) for p in notices] == [(first["ts"], REFUSAL_NOTICES["external"])]
    assert len(rig.model.requests) == 1  # the internal channel's answer only
    assert rig.slack.files.gets(file["id"]) == 0
    await wait_for_task(rig.db, f"{DEFAULT_TEAM}:{CONNECT}:{first['ts']}", "done")
    assert 'threadgate_limited_messages_total{scope="external"} 2.0' in await metrics(rig)


async def test_an_event_that_does_not_say_is_looked_up_once_per_channel(rig: Rig) -> None:
    """Without `is_ext_shared_channel`, conversations.info decides: the shared channel is
    refused, the internal one answered, each asked about once for two messages."""
    rig.slack.channels.share(CONNECT, external=True, teams=[DEFAULT_TEAM, "T9"])
    for n in range(2):
        await send(rig, event_callback(from_partner(f"question {n}"), ext_shared=None))
        own = app_mention_event(text=f"<@UBOT> internal {n}")
        await send(rig, event_callback(own, ext_shared=None))
    posts = await rig.slack.wait_for_posts(4)
    refused = [p.text for p in posts if p.channel == CONNECT]
    assert refused == [REFUSAL_NOTICES["external"]] * 2  # two threads, one notice each
    assert len(rig.model.requests) == 2
    asked = [c.params["channel"] for c in rig.slack.calls_to("conversations.info")]
    assert sorted(asked) == sorted([CONNECT, DEFAULT_CHANNEL])


async def test_a_channel_whose_sharing_cannot_be_checked_is_refused(rig: Rig) -> None:
    """conversations.info refused (a scope missing): fail closed, with the notice that
    says the check could not be made, and no model call."""
    rig.slack.refuse("conversations.info", "missing_scope")
    event = app_mention_event(text="<@UBOT> are you there?")
    await send(rig, event_callback(event, ext_shared=None))
    (notice,) = await rig.slack.wait_for_posts(1)
    assert (notice.thread_ts, notice.text) == (event["ts"], REFUSAL_NOTICES["unverified"])
    assert rig.model.requests == []
    # No answer was remembered: the next message asks again, and is answered.
    later = app_mention_event(text="<@UBOT> and now?")
    await send(rig, event_callback(later, ext_shared=None))
    posts = await rig.slack.wait_for_posts(2)
    assert posts[1].thread_ts == later["ts"] and "and now?" in posts[1].text
    assert len(rig.slack.calls_to("conversations.info")) == 2


@pytest.mark.parametrize("mode", BOTH)
async def test_an_allowed_connect_channel_is_answered_and_says_who_is_external(
    fresh_dsn: str, tmp_path: Path, mode: str
) -> None:
    """With `"externalChannels": "allow"` for the channel, it is answered; the partner's
    turn carries org="external", a colleague's does not, and the prompt says what it means."""
    config = tmp_path / "channels.json"
    config.write_text(json.dumps({"channels": {CONNECT: {"externalChannels": "allow"}}}))
    overrides = {"THREADGATE_CHANNEL_CONFIG": str(config)}
    async with Rig(fresh_dsn, overrides=overrides, socket_mode=mode == "socket") as rig:
        if rig.socket_mode:
            await rig.sockets.wait_for_connections(1)
        first = from_partner("which plan are we on?")
        await send(rig, event_callback(first, ext_shared=True))
        await rig.slack.wait_for_posts(1)
        colleague = app_mention_event(
            text="<@UBOT> and ours?", channel=CONNECT, thread_ts=first["ts"]
        )
        await send(rig, event_callback(colleague, ext_shared=True))
        await rig.slack.wait_for_posts(2)
        body = rig.model.requests[1].body
        turns = [
            parse_turn(unlabelled(m["content"])) for m in body["messages"] if m["role"] == "user"
        ]
        assert [(t.user_id, t.org) for t in turns] == [
            ("UPARTNER1", "external"),
            (colleague["user"], None),
        ]
        assert EXTERNAL_NOTE in body["messages"][0]["content"]
