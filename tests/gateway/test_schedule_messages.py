"""What people read about a schedule made by asking: the message asking its owner to
approve it, the message once decided, and the note that it was paused. The prompt in each
is text the model wrote (maybe planted by someone else): it cannot ping or mention anyone,
and the only mention is the owner's, which we write."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from agent import ScheduleEntry, recur_every
from gateway.delivery.schedule_approval import decided_message, request_message
from gateway.schedules.preflight import SLACK_CONNECT, owner_notice
from gateway.slack.interactive import APPROVE, DENY, schedule_of
from storage import StoredSchedule
from tests.gateway.test_rendering import PING

OWNER = "U0OWNER0001"
ASKED_IN = "<https://example.slack.com/archives/C1/p1700000000000100>"

# Pieces of text Slack would turn into pings if let through, and what could close a fence.
hostile = st.lists(
    st.sampled_from(
        ["<", ">", "!", "@", "#", "&", "`", "|", "here", "channel", " ", "\n", "a", "U1"]
    ),
    max_size=60,
).map("".join)


def entry(prompt: str) -> ScheduleEntry:
    return ScheduleEntry("7", prompt, "every 1h", "channel C1", "pending", owner=OWNER)


def schedule(prompt: str) -> StoredSchedule:
    now = datetime.now(UTC)
    return StoredSchedule(
        "7",
        "T1",
        "channel",
        prompt,
        recur_every("1h"),
        now,
        "catch_up",
        OWNER,
        now,
        "pending",
        channel="C1",
        owner=f"T1:{OWNER}",
    )


def pings(text: str) -> list[str]:
    """The ping sequences in `text`, our owner's mention aside."""
    return [m[0] for m in PING.finditer(text) if m[0] != f"<@{OWNER}>"]


@given(hostile)
def test_the_ask_mentions_only_the_owner_and_carries_the_schedules_buttons(prompt: str) -> None:
    """Whatever the prompt, the ask holds no ping but the owner's mention, and its Approve
    and Deny buttons name the schedule."""
    message = request_message(entry(prompt), ASKED_IN)
    shown = json.dumps(message.blocks, ensure_ascii=False)
    assert pings(shown.replace("\\n", "\n")) == [] and pings(message.text) == []
    [actions] = [b for b in message.blocks if b["type"] == "actions"]
    buttons = {e["action_id"]: e["value"] for e in actions["elements"]}
    assert set(buttons) == {APPROVE, DENY} and {schedule_of(v) for v in buttons.values()} == {"7"}
    assert f"<@{OWNER}>" in shown and ASKED_IN in shown


@given(hostile, st.sampled_from(["approved", "denied", "timed_out"]))
def test_the_decided_message_has_no_buttons_and_no_ping(prompt: str, verdict: str) -> None:
    """Once decided: the schedule and the decision, no buttons, no ping but the decider's."""
    message = decided_message(schedule(prompt), verdict, OWNER)
    shown = json.dumps(message.blocks, ensure_ascii=False).replace("\\n", "\n")
    assert all(b["type"] != "actions" for b in message.blocks)
    assert pings(shown) == [] and pings(message.text) == []


@given(hostile)
def test_the_owners_pause_note_cannot_ping(prompt: str) -> None:
    """The note to the owner quotes a bit of the prompt, neutralized: no ping, one line of it."""
    note = owner_notice(schedule(prompt), SLACK_CONNECT)
    assert pings(note) == [] and not re.search(r"<[!@#]", note)
    assert "Slack Connect" in note and "schedule 7" in note
