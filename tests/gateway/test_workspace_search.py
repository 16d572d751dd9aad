"""Workspace search through a real gateway (issue 43, item 6): `search_workspace` makes one
`assistant.search.context` call with the asker's action token, finds only what that person
may see, reaches the model as turns with their permalinks (citable in the Sources line),
and leaves nothing of what it found in Postgres; without a person's token (a schedule's
run) or with Slack's refusal the model reads a tool error that says what to tell them."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent import recur_once
from storage import NewSchedule, create_schedule
from tests.fakes.openai_api import RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    app_mention_event,
    deliver,
    dm_message_event,
    event_callback,
    new_ts,
)
from tests.fakes.slack_permalinks import WORKSPACE_URL
from tests.fakes.slack_search import expire_action_token
from tests.gateway.rig import SECRET, Rig
from tests.gateway.schedules_help import runs_settled, schedule_run
from tests.gateway.test_pasted_secrets import metrics, stored_text
from tests.pg import wait_for_task

BOB = "U0B0B0B0B01"
LAUNCH, BOARD = "C0LAUNCH001", "G0BOARD0001"
PUBLIC_TEXT = "We moved the launch to May 3, after the beta."
PRIVATE_TEXT = "Launch budget is cut in half, keep it quiet."
SEARCH_ON = {"THREADGATE_WORKSPACE_SEARCH": "true"}
METHOD = "assistant.search.context"
TURN = re.compile(r'<turn from="(?P<name>[^"]*)" id="(?P<id>[^"]*)" channel="(?P<channel>[^"]*)"')

pytestmark = pytest.mark.rig(overrides=SEARCH_ON, users={DEFAULT_USER: "Ada", BOB: "Bob"})


def seed(rig: Rig) -> str:
    """A public #launch-plans that says the date, and a private #board only Bob is in that
    says the budget; the public message's permalink."""
    rig.slack.search.channel(LAUNCH, "launch-plans")
    rig.slack.search.channel(BOARD, "board", kind="private_channel", members={BOB})
    ts = new_ts()
    rig.slack.seed_message(LAUNCH, ts, DEFAULT_USER, PUBLIC_TEXT)
    rig.slack.seed_message(BOARD, new_ts(), BOB, PRIVATE_TEXT)
    return f"{WORKSPACE_URL}/archives/{LAUNCH}/p{ts.replace('.', '')}"


def tool_results(seen: RecordedRequest) -> list[str]:
    return [str(m["content"]) for m in seen.body["messages"] if m.get("role") == "tool"]


def searcher(cite: str | None = None) -> Any:
    """A model that searches for "launch" first, then answers (citing `cite`, if given)."""

    def answer(seen: RecordedRequest) -> Reply:
        if not tool_results(seen):
            return reply_with_tool("search_workspace", {"query": "launch"}, call_id="find")
        citations = [{"url": cite}] if cite else []
        return reply_with_tool("final_reply", {"text": "It moved.", "citations": citations})

    return answer


async def test_a_mention_searches_once_as_its_writer_and_keeps_nothing(rig: Rig) -> None:
    """One assistant.search.context call with the event's action token, public channels
    only; the model reads Ada's message in her turn with its permalink, the reply's Sources
    line links it, and after the task no table holds the text found or the token."""
    link = seed(rig)
    rig.model.default = searcher(cite=link)
    event = app_mention_event(text="<@UBOT> what did we decide about the launch?")
    await rig.send(event_callback(event))
    (reply,) = await rig.slack.wait_for_posts(1)
    [call] = rig.slack.calls_to(METHOD)
    assert call.params["action_token"] == event["action_token"]
    assert (call.params["query"], call.params["channel_types"]) == ("launch", "public_channel")
    assert call.token == "xoxb-test" and "action_token" not in rig.slack.calls[-1].params
    [found] = tool_results(rig.model.requests[1])
    assert TURN.findall(found) == [("Ada", DEFAULT_USER, LAUNCH)]
    assert PUBLIC_TEXT in found and f"in #launch-plans, link: {link}" in found
    assert "budget" not in found  # Ada is not in #board
    assert link in reply.text  # the Sources line
    await wait_for_task(rig.db, f"T1:{DEFAULT_CHANNEL}:{event['ts']}", "done")
    stored = await stored_text(rig)
    assert "May 3" not in stored and event["action_token"] not in stored
    output = await rig.db.pool.fetchval(
        "SELECT output FROM tool_calls WHERE name = 'search_workspace'"
    )
    assert re.fullmatch(r"\[[0-9,]+ characters shown to the model and not kept\]", output)
    assert 'threadgate_workspace_searches_total{outcome="ok"} 1.0' in await metrics(rig)


async def test_from_a_dm_each_person_finds_what_they_may_see(rig: Rig) -> None:
    """In a DM every channel type is searched, as the DM's person: Bob finds #board's
    message, Ada (not a member) does not."""
    seed(rig)
    rig.model.default = searcher()
    ada = dm_message_event(text="anything on the launch?")
    bob = dm_message_event(text="anything on the launch?", user=BOB, channel="D0B0B0B0B01")
    for event in (ada, bob):
        await rig.send(event_callback(event))
    await rig.slack.wait_for_posts(2)
    calls = {c.params["action_token"]: c for c in rig.slack.calls_to(METHOD)}
    assert set(calls) == {ada["action_token"], bob["action_token"]}
    assert {c.params["channel_types"] for c in calls.values()} == {
        "public_channel,private_channel,mpim,im"
    }
    seen = dict(_found_by_person(rig))
    assert PRIVATE_TEXT not in seen[DEFAULT_USER] and PUBLIC_TEXT in seen[DEFAULT_USER]
    assert PRIVATE_TEXT in seen[BOB] and PUBLIC_TEXT in seen[BOB]
    assert sorted(s.user for s in rig.slack.search.searches) == sorted([DEFAULT_USER, BOB])


def _found_by_person(rig: Rig) -> list[tuple[str, str]]:
    """Each search's result, by the person whose DM it answered."""
    found = []
    for seen in rig.model.requests:
        results = tool_results(seen)
        if results:
            person = BOB if "D0B0B0B0B01" in json.dumps(seen.body) else DEFAULT_USER
            found.append((person, results[0]))
    return found


@pytest.mark.rig(overrides={**SEARCH_ON, "THREADGATE_SCHEDULE_MIN_PERIOD_SECONDS": "1"})
async def test_a_scheduled_run_is_refused_with_a_tool_error_it_can_relay(
    rig: Rig, tmp_path: Path
) -> None:
    """A schedule's run has no person's token: search_workspace asks Slack nothing and the
    model reads an error that says why and to tell it in the reply."""
    rig.model.default = searcher()
    soon = datetime.now(UTC) + timedelta(seconds=1)
    new = NewSchedule(
        "T1", "channel", "Digest the launch", recur_once(soon), "test", channel="C0DIGEST1"
    )
    schedule = (await create_schedule(rig.db, new)).id
    await rig.slack.wait_until(
        lambda: any(p.channel == "C0DIGEST1" for p in rig.slack.posts), 30, what="the run's post"
    )
    await runs_settled(rig.db, schedule)
    assert rig.slack.calls_to(METHOD) == []
    [refused] = [t for r in rig.model.requests if schedule_run(r) for t in tool_results(r)]
    assert "search_workspace cannot search here" in refused and "Error:" in refused
    assert "say in your reply that the workspace could not be searched" in refused
    counted = await metrics(rig)
    assert 'threadgate_workspace_searches_total{outcome="no_action_token"} 1.0' in counted


REFUSALS = {
    "missing_scope": "the app lacks the scope search:read.public",
    "ratelimited": "Slack is rate-limiting workspace searches (Slack asked to wait 60 s)",
    "invalid_action_token": "the permission to search as the person who asked has expired",
    "not_allowed_token_type": "Slack refused the app's token for workspace search",
}


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
async def test_slack_s_refusal_reaches_the_model_as_a_tool_error(rig: Rig, refusal: str) -> None:
    """Each refusal is one call, answered to the model at once (a 429 is not waited out)
    with what to tell the person; a refused token for search raises no token alarm."""
    seed(rig)
    rig.model.default = searcher()
    event = app_mention_event(text="<@UBOT> what about the launch?")
    if refusal == "missing_scope":
        rig.slack.granted_scopes = ["chat:write", "users:read"]
    elif refusal == "ratelimited":
        rig.slack.rate_limit(METHOD, retry_after=60)
    elif refusal == "invalid_action_token":
        expire_action_token(event["action_token"])
    else:
        rig.slack.refuse(METHOD, refusal)
    await rig.send(event_callback(event))
    await rig.slack.wait_for_posts(1)
    assert len(rig.slack.calls_to(METHOD)) == 1
    [refused] = tool_results(rig.model.requests[1])
    assert REFUSALS[refusal] in refused
    assert "say in your reply that the workspace could not be searched" in refused
    assert [p for p in rig.slack.posts if p.channel == "COPS"] == []  # no operator alarm
    assert f'threadgate_workspace_searches_total{{outcome="{refusal}"}} 1.0' in await metrics(rig)


async def test_a_channel_policy_withholds_the_tool_and_without_the_setting_it_is_absent(
    rig: Rig, tmp_path: Path
) -> None:
    """search_workspace is an ordinary tool name: a channel whose tools do not list it is
    not offered it; elsewhere it is; a gateway without THREADGATE_WORKSPACE_SEARCH offers
    it nowhere."""
    config = tmp_path / "channels.json"
    config.write_text(json.dumps({"channels": {"C0NOSEARCH": {"tools": ["current_time"]}}}))
    await rig.gateway.stop()
    policed = await rig.start_gateway(
        socket_mode=False, overrides={**SEARCH_ON, "THREADGATE_CHANNEL_CONFIG": str(config)}
    )
    offered: dict[str, set[str]] = {}

    def note(seen: RecordedRequest) -> Reply:
        text = json.dumps(seen.body["messages"])
        where = next(c for c in ("C0NOSEARCH", "C0SEARCHES", "C0PLAIN001") if c in text)
        offered[where] = {t["function"]["name"] for t in seen.body.get("tools", [])}
        return reply_with_tool("final_reply", {"text": "ok"})

    rig.model.default = note
    for gateway, channel in ((policed, "C0NOSEARCH"), (policed, "C0SEARCHES")):
        event = app_mention_event(text="<@UBOT> hi", channel=channel)
        url = f"http://127.0.0.1:{gateway.port}/slack/events"
        assert (await deliver(rig.http, url, event_callback(event), SECRET))[0] == 200
    await rig.slack.wait_for_posts(2)
    await policed.stop()  # only the plain gateway's workers answer the next one
    plain = await rig.start_gateway(
        socket_mode=False, overrides={"THREADGATE_WORKSPACE_SEARCH": "false"}
    )
    event = app_mention_event(text="<@UBOT> hi", channel="C0PLAIN001")
    url = f"http://127.0.0.1:{plain.port}/slack/events"
    assert (await deliver(rig.http, url, event_callback(event), SECRET))[0] == 200
    await rig.slack.wait_for_posts(3)
    assert "search_workspace" not in offered["C0NOSEARCH"]
    assert "search_workspace" in offered["C0SEARCHES"]
    assert "search_workspace" not in offered["C0PLAIN001"]
