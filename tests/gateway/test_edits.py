"""Reading message_changed and message_deleted: typed records, or a MalformedEvent (a 400),
never anything else, whatever shape the payload has."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.inbound.edits import Deletion, Edit, inbound_change
from gateway.slack.events import MalformedEvent
from tests.fakes.slack_events import (
    event_callback,
    message_changed_event,
    message_deleted_event,
)

TS = "1700000000.000100"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
FIELDS = ("channel", "ts", "message", "previous_message", "deleted_ts", "channel_type")
MESSAGE_FIELDS = ("ts", "user", "text", "thread_ts", "subtype", "bot_id", "files", "edited")


@given(
    st.sampled_from(["message_changed", "message_deleted"]),
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4),
    st.dictionaries(st.sampled_from(MESSAGE_FIELDS), json_values, max_size=4),
)
def test_any_shape_is_a_record_none_or_malformed(
    subtype: str, event_changes: dict[str, Any], message_changes: dict[str, Any]
) -> None:
    """Whatever the fields hold, reading the event never fails any other way."""
    event = (
        message_changed_event(ts=TS, new_text="new", old_text="old")
        if subtype == "message_changed"
        else message_deleted_event(ts=TS, old_text="old")
    )
    if isinstance(event.get("message"), dict):
        event["message"] = {**event["message"], **message_changes}
    event |= event_changes
    try:
        change = inbound_change(event_callback(event))
    except MalformedEvent:
        return
    assert change is None or isinstance(change, Edit | Deletion)


def test_an_edit_reads_the_new_message_with_its_edit_time() -> None:
    """The turn is the message as it is now, in its thread, with the time of the edit."""
    event = message_changed_event(
        ts=TS, new_text="<@UBOT> now", old_text="before", thread_ts="1700000000.000001"
    )
    change = inbound_change(event_callback(event))
    assert isinstance(change, Edit)
    assert (change.turn.ts, change.turn.text, change.previous_text) == (TS, "<@UBOT> now", "before")
    assert change.turn.thread_ts == "1700000000.000001" and change.turn.edited == event["ts"]
    assert not change.turn.mentioned


def test_unchanged_text_bot_messages_and_tombstones() -> None:
    """An unfurl (same text) and a bot's edit are nothing; a tombstoned parent is a deletion."""
    unfurl = message_changed_event(ts=TS, new_text="same", old_text="same")
    bot = message_changed_event(ts=TS, new_text="a", old_text="b")
    bot["message"]["bot_id"] = "B1"
    tombstone = message_changed_event(ts=TS, new_text="This message was deleted.", old_text="x")
    tombstone["message"]["subtype"] = "tombstone"
    assert inbound_change(event_callback(unfurl)) is None
    assert inbound_change(event_callback(bot)) is None
    change = inbound_change(event_callback(tombstone))
    assert isinstance(change, Deletion) and (change.channel, change.ts) == (
        tombstone["channel"],
        TS,
    )
