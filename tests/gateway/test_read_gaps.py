"""Gaps are said, not hidden (issue 43, item 3): in Slack's limited read tier, a thread
that could not be read whole before the ack reaches the model with a labelled runtime note
saying how many earlier messages it did not see, and the next turn there reads them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    app_mention_event,
    event_callback,
    new_ts,
)
from tests.gateway.rig import Rig

pytestmark = pytest.mark.rig(users={DEFAULT_USER: "Ada", "U0BOB00001": "Bob"})
REPLIES = "conversations.replies"


def user_texts(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m.get("role") == "user"]


async def mention(rig: Rig, text: str, ts: str, thread_ts: str) -> None:
    rig.slack.seed_message(DEFAULT_CHANNEL, ts, DEFAULT_USER, text, thread_ts=thread_ts)
    event = app_mention_event(text=text, ts=ts, thread_ts=thread_ts)
    assert (await rig.send(event_callback(event)))[0] == 200


async def a_minute_passes(rig: Rig) -> None:
    """For Slack (the fake's clock) and for the gateway's shared budget alike."""
    rig.slack.reads.advance(60)
    await rig.db.pool.execute("UPDATE slack_read_budgets SET next_at = now()")


async def test_what_could_not_be_read_is_said_and_read_at_the_next_turn(rig: Rig) -> None:
    """A first mention in a 21-message thread: Slack gives 15 and holds the rest for a
    minute, so the model is told, after the turn and outside it, that 6 earlier messages
    were not read; the next mention there reads those 6, and says nothing is missing."""
    rig.slack.reads.limited = True
    root = new_ts()
    rig.slack.seed_message(DEFAULT_CHANNEL, root, "U0BOB00001", "message 0")
    for n in range(1, 21):
        rig.slack.seed_message(DEFAULT_CHANNEL, new_ts(), "U0BOB00001", f"message {n}", root)
    await mention(rig, "<@UBOT> summarize", new_ts(), root)
    await rig.slack.wait_for_posts(1)
    first = user_texts(rig.model.requests[0].body)
    note = (
        '<runtime source="context_gap">6 earlier messages in this thread were not read (Slack\'s read limit); '
        "they are read for your next turn here.</runtime>"
    )
    assert first[-1].endswith("</turn>\n" + note) and "summarize" in first[-1]
    assert sum("message " in t for t in first[:-1]) == 15
    assert len(rig.slack.calls_to(REPLIES)) == 1 and not rig.slack.reads.refused
    await a_minute_passes(rig)
    await mention(rig, "<@UBOT> and the rest?", new_ts(), root)
    await rig.slack.wait_for_posts(2)
    second = user_texts(rig.model.requests[1].body)
    assert {f"message {n}" for n in range(15, 21)} <= {
        f"message {n}" for n in range(21) for t in second if f"message {n}<" in t
    }
    assert "<runtime" not in second[-1] and "and the rest?" in second[-1]
    assert sum(note in t for t in second) == 1  # the first turn's note, in its history


async def test_a_thread_slack_would_not_read_at_all_says_some_were_not_read(rig: Rig) -> None:
    """When the workspace's read of the minute is spent, a first mention mid-thread is
    answered at once without a call, and the model is told that some earlier messages
    (Slack gave no count) were not read."""
    rig.slack.reads.limited = True
    await rig.db.pool.execute(
        "INSERT INTO slack_read_budgets (team, method, next_at) "
        "VALUES ('T1', 'conversations.replies', now() + interval '1 minute')"
    )
    root = new_ts()
    rig.slack.seed_message(DEFAULT_CHANNEL, root, "U0BOB00001", "what do we ship?")
    await mention(rig, "<@UBOT> answer Bob", new_ts(), root)
    await rig.slack.wait_for_posts(1)
    turn = user_texts(rig.model.requests[0].body)[-1]
    assert (
        '<runtime source="context_gap">Some earlier messages in this thread were not read' in turn
    )
    assert rig.slack.calls_to(REPLIES) == []
