"""Pin payloads: a pin of a message becomes a `PinChange` in the right conversation;
anything else is None; a malformed one is a `MalformedEvent` (a 400), never a crash. The
notice to whoever pinned past the cap names what fell out, and cannot ping."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.inbound.pins import QUOTE_CHARS, cap_notice, pin_change
from gateway.slack.events import MalformedEvent
from gateway.text.provenance import Turn, render_turn
from storage import ListedPin, PinRoom
from tests.fakes.slack_events import DEFAULT_DM, app_mention_event, event_callback
from tests.fakes.slack_pins import file_pin_event, pin_event, pinned_message

TS = "1700000000.000200"
ROOT = "1700000000.000100"


def test_a_pinned_thread_reply_belongs_to_its_thread() -> None:
    """The session is the thread's; the ids it may be stored under are the turn's and the
    back-filled message's."""
    change = pin_change(event_callback(pin_event(pinned_message(text="hi", ts=TS, thread_ts=ROOT))))
    assert change is not None and change.added
    assert change.session_id == f"T1:C0A1B2C3D4E:{ROOT}"
    assert change.stored_as().candidate_ids == (
        f"task:T1:C0A1B2C3D4E:{TS}:user",
        f"slack:T1:C0A1B2C3D4E:{TS}",
    )


def test_a_top_level_dm_message_belongs_to_the_dm_conversation() -> None:
    """A DM's top-level messages are one running conversation."""
    event = pin_event(pinned_message(text="hi", ts=TS), channel=DEFAULT_DM, added=False)
    change = pin_change(event_callback(event))
    assert change is not None and not change.added and change.session_id == f"T1:{DEFAULT_DM}"


def test_a_pin_says_who_pinned_and_where_to_tell_them() -> None:
    """The pinner comes from the event's `user`; the thread to tell them in is the
    message's, its own ts for a thread's parent, none for a top-level DM message."""
    reply = pin_change(event_callback(pin_event(pinned_message(text="hi", ts=TS, thread_ts=ROOT))))
    parent = pin_change(event_callback(pin_event(pinned_message(text="hi", ts=ROOT))))
    dm = pin_change(event_callback(pin_event(pinned_message(text="hi", ts=TS), channel=DEFAULT_DM)))
    assert reply is not None and parent is not None and dm is not None
    assert (reply.by, reply.thread, parent.thread, dm.thread) == ("U0A1B2C3D4E", ROOT, ROOT, None)


def test_other_events_and_pins_are_not_pin_changes() -> None:
    """A mention, a pinned file: None. A bot's message pinned has no author to render."""
    assert pin_change(event_callback(app_mention_event(text="<@UBOT> hi"))) is None
    assert pin_change(event_callback(file_pin_event())) is None
    bot = pinned_message(text="beep", ts=TS, user=None, bot_id="B1")
    change = pin_change(event_callback(pin_event(bot)))
    assert change is not None and change.author is None


@pytest.mark.parametrize("field", ["channel_id", "item"])
def test_a_pin_without_its_parts_is_malformed(field: str) -> None:
    """A pin event missing what it must name is refused as malformed."""
    event = pin_event(pinned_message(text="hi", ts=TS))
    del event[field]
    with pytest.raises(MalformedEvent):
        pin_change(event_callback(event))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    kind=st.sampled_from(["pin_added", "pin_removed"]),
    message=st.dictionaries(
        st.sampled_from(["ts", "thread_ts", "user", "text", "bot_id", "subtype"]), json_values
    ),
    text=st.text(),
)
def test_any_pin_payload_is_a_change_none_or_malformed(
    kind: str, message: dict[str, Any], text: str
) -> None:
    """Whatever Slack (or someone forging a payload) sends in a pin, the answer is a change,
    None or `MalformedEvent`: never another exception (which would be a 500)."""
    event = pin_event(pinned_message(text=text, ts=TS), added=kind == "pin_added")
    event["item"]["message"] = message
    with contextlib.suppress(MalformedEvent):
        change = pin_change(event_callback(event))
        assert change is None or change.ts == message["ts"]


def listed(text: str, role: str = "user") -> ListedPin:
    return ListedPin("m1", role, "turn" if role == "user" else "reply", text, datetime.now(UTC))


ROOM = PinRoom(3, 12_000)


def test_the_notice_names_whose_messages_are_now_listed_and_how_they_start() -> None:
    """A person's turn is named by its author and its opening words; our answer as ours;
    the notice says they stay pinned and how much room there is."""
    turn = render_turn(Turn("Ada", "U1", "C1", datetime.now(UTC), "budget is 42k " * 20))
    notice = cap_notice([listed(turn), listed("Use the **blue** one.", "assistant")], ROOM)
    assert notice.startswith(
        "Pinned. I read the newest 3 pins of a conversation whole, in about 12,000 characters"
    )
    assert "Ada’s message “budget is 42k budget" in notice and "…”" in notice
    assert "my answer “Use the **blue** one.”" in notice
    assert " are now shown to me only by who wrote them " in notice and "still pinned" in notice


@given(text=st.text(), name=st.text(), role=st.sampled_from(["user", "assistant"]))
def test_no_notice_can_ping_or_link(text: str, name: str, role: str) -> None:
    """Whatever the listed message said, and whoever wrote it, the notice holds no `<` (no
    mention, broadcast or link can form), no bare broadcast, and quotes a bounded part of
    it."""
    stored = render_turn(Turn(name, "U1", "C1", datetime.now(UTC), text)) if name else text
    notice = cap_notice([listed(stored, role)], ROOM)
    assert "<" not in notice
    assert not any(f"@{word}" in notice for word in ("here", "channel", "everyone"))
    assert len(notice) < 400 + 6 * QUOTE_CHARS
