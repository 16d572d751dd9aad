"""Feedback on replies, with real gateways: every final reply carries Slack's feedback
buttons, posted or streamed; a click is stored once per person and reply with the reply's
prompt epoch and route, counted in `threadgate_feedback_total`, listed by `tasks show` and
reported per prompt epoch and model by `threadgate feedback` — over HTTP and Socket Mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.slack.interactive import FEEDBACK
from storage import votes_of
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    app_mention_event,
    deliver_interaction,
    event_callback,
)
from tests.gateway.process import run_cli_output
from tests.gateway.rig import BOTH, SECRET, STREAMING, Rig, gateway_env

OTHER = "U0OTHER0001"


def feedback_block(blocks: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The reply's `context_actions` block with its feedback buttons element."""
    [block] = [b for b in blocks or [] if b["type"] == "context_actions"]
    return block


async def vote(rig: Rig, ts: str, user: str, value: str) -> None:
    payload = rig.slack.click(DEFAULT_CHANNEL, ts, FEEDBACK, user=user, vote=value)
    if rig.socket_mode:
        await rig.sockets.wait_for_ack(await rig.sockets.deliver_interactive(payload))
    else:
        status, body = await deliver_interaction(rig.http, rig.events_url, payload, SECRET)
        assert status == 200, body


async def mention(rig: Rig) -> dict[str, Any]:
    event = app_mention_event(text="<@UBOT> hello")
    if rig.socket_mode:
        await rig.sockets.wait_for_ack(await rig.sockets.deliver(event_callback(event)))
    else:
        assert (await rig.send(event_callback(event)))[0] == 200
    return event


async def metric(rig: Rig, value: str) -> float:
    async with rig.http.get(rig.metrics_url) as response:
        text = await response.text()
    line = f'threadgate_feedback_total{{value="{value}"}} '
    found = [row for row in text.splitlines() if row.startswith(line)]
    return float(found[0].removeprefix(line)) if found else 0.0


@pytest.mark.rig(modes=BOTH)
async def test_a_posted_reply_carries_feedback_and_a_vote_is_one_per_person(
    rig: Rig, tmp_path: Path
) -> None:
    """The reply's feedback buttons (positive and negative, each with a value) are below its
    text; a person's second click changes their vote, another person's adds one; both are
    counted, listed by `tasks show` with the reply's epoch and route, and reported."""
    event = await mention(rig)
    [reply] = await rig.slack.wait_for_posts(1)
    [element] = feedback_block(reply.blocks)["elements"]
    assert element["type"] == "feedback_buttons"
    assert element["positive_button"]["value"] != element["negative_button"]["value"]
    assert reply.blocks is not None and reply.blocks[0]["type"] == "markdown"

    await vote(rig, reply.ts, DEFAULT_USER, "positive")
    await vote(rig, reply.ts, DEFAULT_USER, "negative")
    await vote(rig, reply.ts, OTHER, "positive")
    task = f"T1:{DEFAULT_CHANNEL}:{event['ts']}"
    votes = await votes_of(rig.db, f"task:{task}:reply")
    assert sorted((v.user_id, v.value) for v in votes) == [
        (DEFAULT_USER, "negative"),
        (OTHER, "positive"),
    ]
    assert {(v.route_provider, v.route_model) for v in votes} == {("openai", "gpt-test")}
    assert all(v.prompt_epoch for v in votes)
    assert (await metric(rig, "positive"), await metric(rig, "negative")) == (2.0, 1.0)

    env = gateway_env(rig.slack, rig.model, rig.database_url)
    status, out, err = await run_cli_output(["tasks", "show", task, "--json"], env, tmp_path)
    assert status == 0, err
    shown = json.loads(out)["feedback"]
    assert sorted(v["value"] for v in shown) == ["negative", "positive"]
    status, out, err = await run_cli_output(["feedback", "--json"], env, tmp_path)
    assert status == 0, err
    [line] = json.loads(out)
    assert (line["model"], line["positive"], line["negative"], line["ratio"]) == (
        "gpt-test",
        1,
        1,
        0.5,
    )
    status, out, err = await run_cli_output(["feedback"], env, tmp_path)
    assert status == 0 and "openai:gpt-test" in out and "50%" in out, err


@pytest.mark.rig(overrides=STREAMING, modes=BOTH)
async def test_a_streamed_reply_gets_its_feedback_buttons_when_the_stream_stops(
    rig: Rig,
) -> None:
    """A reply streamed as the model wrote it: the buttons go with `chat.stopStream`, and
    a click on the streamed message is stored like one on a posted reply."""
    event = await mention(rig)
    [stream] = await rig.slack.wait_for_streams(1, stopped=True)
    [stop] = rig.slack.calls_to("chat.stopStream")
    feedback_block(stop.params.get("blocks"))
    assert rig.slack.posts == []
    await vote(rig, stream.ts, DEFAULT_USER, "positive")
    task = f"T1:{DEFAULT_CHANNEL}:{event['ts']}"
    [stored] = await votes_of(rig.db, f"task:{task}:reply")
    assert (stored.user_id, stored.value) == (DEFAULT_USER, "positive")
