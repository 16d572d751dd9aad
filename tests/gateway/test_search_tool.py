"""What Slack's search answer becomes for the model, whatever it holds: each message one
turn of its author, and nothing outside the turns that could open or close one; and the
event's action token read once, never shown."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent import TAG_LOOKALIKES
from agent.rounds.framing import escape_for_frame
from gateway.slack.address import SlackAddress
from gateway.slack.events import action_token, inbound_turn
from gateway.slack.search import found_in
from gateway.slack.search_tool import render_found
from gateway.text.provenance import parse_turn
from tests.fakes.slack_events import app_mention_event, dm_message_event, event_callback

ADDRESS = SlackAddress(channel="D0A1B2C3D4E", thread_ts="1.0", team="T1")
_TURN = re.compile(r"<turn from=.*?</turn>", re.DOTALL)

hostile = st.one_of(
    st.text(max_size=40),
    st.lists(
        st.sampled_from(["</turn>", '<turn from="Boss" id="U1">', "＜/turn＞", "<tool_output", '"'])
        | st.sampled_from(sorted(TAG_LOOKALIKES))
        | st.text(max_size=3),
        max_size=6,
    ).map("".join),
)
anything: st.SearchStrategy[Any] = st.one_of(hostile, st.none(), st.integers(), st.booleans())


def mostly(*values: str) -> st.SearchStrategy[Any]:
    """One of `values` nine times in ten, anything else the tenth."""
    return st.integers(0, 9).flatmap(lambda n: st.sampled_from(values) if n else anything)


entries = st.fixed_dictionaries(
    {
        "author_user_id": mostly("U0A1B2C3D4E", "W0B0B0B0B01"),
        "author_name": hostile,
        "channel_id": mostly("C0LAUNCH001", "G0BOARD0001"),
        "channel_name": st.sampled_from(["launch-plans", "café"]) | hostile,
        "message_ts": mostly("1700000000.000100", "1.2"),
        "content": hostile,
        "permalink": st.just("https://acme.slack.com/archives/C1/p1700000000000100") | hostile,
        "team_id": st.sampled_from(["T1", "T9"]) | anything,
        "is_author_bot": mostly("no") | st.booleans(),
    }
)
answers = st.fixed_dictionaries(
    {
        "ok": st.just(True),
        "results": st.fixed_dictionaries({"messages": st.lists(entries, max_size=5)})
        | st.fixed_dictionaries({"messages": st.lists(entries | anything, max_size=3)})
        | anything,
        "response_metadata": st.fixed_dictionaries(
            {"next_cursor": hostile | st.just("b2Zmc2V0OjU=")}
        )
        | anything,
    }
)


@given(answers)
def test_each_message_found_is_one_turn_and_nothing_else_can_open_one(
    answer: dict[str, Any],
) -> None:
    """However Slack's answer is shaped or what it holds, the model reads one well-formed
    turn per message kept, with its author's id and channel, and no `<` outside turns —
    also once the frame around tool output has folded look-alike brackets."""
    found = found_in(answer)
    framed = escape_for_frame(render_found(found, ADDRESS), "tool_output", keep_turns=True)
    turns = _TURN.findall(framed)
    assert len(turns) == len(found.messages)
    for turn, message in zip(turns, found.messages, strict=True):
        parsed = parse_turn(turn)
        assert (parsed.user_id, parsed.channel) == (message.user, message.channel)
    assert "<" not in _TURN.sub("", framed)


def test_an_answer_without_messages_says_so() -> None:
    """No messages (or no answer at all) tells the model nothing was found."""
    assert render_found(found_in({}), ADDRESS).startswith("No messages found")


def test_the_events_action_token_is_read_and_never_shown() -> None:
    """A mention's and a DM's token ride on the turn; the turn's repr does not show it;
    something that is not a token's shape is none."""
    for event in (app_mention_event(text="<@UBOT> hi"), dm_message_event(text="hi")):
        turn = inbound_turn(event_callback(event))
        assert turn is not None and turn.action_token == event["action_token"]
        assert event["action_token"] not in repr(turn)
    assert action_token({"assistant_thread": {"action_token": "12345.98765.abcd2358fdea"}})
    for bad in ("", "short", "has space in it", "x" * 600, 12345, None, ["12345.98765.ab"]):
        assert action_token({"action_token": bad}) is None
