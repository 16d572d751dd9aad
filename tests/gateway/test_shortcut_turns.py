"""What the shortcut gives the model, for any text: the message asked about is its author's
turn and the request the person's, and nothing either says can close, open or forge a
turn or a runtime note; the modal carries any message within Slack's limits."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.inbound.asks import Answered, Ask, render_ask
from gateway.slack.events import MalformedEvent
from gateway.slack.shortcut import (
    ASK_VIEW,
    METADATA_LIMIT,
    REQUEST_BLOCK,
    AskSubmission,
    QuotedMessage,
    ask_modal,
    ask_submission,
    read_metadata,
    write_metadata,
)
from gateway.text.provenance import parse_turn
from gateway.text.secrets import Redactions
from tests.fakes.slack_views import view_problem

AUTHOR = "U0AUTHOR001"
ASKER = "U0ASKER0001"
CHANNEL = "C0A1B2C3D4E"
THREAD = Answered(CHANNEL, "1700000000.000100", in_dm=False, ext_shared=False)
DM = Answered("D0ASKER0001", "", in_dm=True, ext_shared=False)

# Text that tries hardest: tags and their look-alikes, quotes, entities, Slack markup.
_PIECES = [*'<>/&"=\n ', "turn", "runtime", "＜", "＞", "＂", "&lt;", "<@U1>", "\u202e", "a"]
tricky = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join) | st.text(max_size=200)


def ask(text: str, request: str) -> Ask:
    message = QuotedMessage(CHANNEL, "1700000000.000200", AUTHOR, text, "1700000000.000100")
    submission = AskSubmission("V0VIEW00001", ASKER, "T1", request, message)
    return Ask("T1", submission)


@settings(max_examples=300)
@given(tricky, tricky, tricky, st.sampled_from([THREAD, DM]))
def test_no_message_or_request_can_forge_a_turn(
    text: str, request: str, name: str, where: Answered
) -> None:
    """Each of the two texts is exactly one turn, by its own author; together they hold
    exactly two turn tags and no runtime note, whatever the message, the request or the
    author's display name say."""
    quoted, asked = render_ask(
        ask(text, request),
        where,
        {AUTHOR: name or "Ada", ASKER: "Grace"},
        bot_user_id="UBOT",
        tally=Redactions(),
    )
    first, second = parse_turn(quoted), parse_turn(asked)
    assert (first.user_id, second.user_id) == (AUTHOR, ASKER)
    both = quoted + asked
    assert both.count("<turn ") == 2 and both.count("</turn>") == 2
    assert "<runtime" not in both
    assert first.channel == CHANNEL and second.channel == where.channel


@given(st.text(max_size=6000), st.lists(st.text(max_size=100), max_size=20))
def test_the_modal_carries_any_message_within_slacks_limits(text: str, files: list[str]) -> None:
    """The metadata fits in 3,000 characters and reads back as the message, its text whole
    or its start marked cut; the modal is one Slack accepts."""
    message = QuotedMessage(
        CHANNEL, "1700000000.000200", AUTHOR, text, None, "T1", tuple(f[:80] for f in files)
    )
    written = write_metadata(message)
    read = read_metadata(written)
    assert len(written) <= METADATA_LIMIT
    assert text.startswith(read.text) and read.cut == (read.text != text)
    assert read.files == message.files and read.author == AUTHOR
    assert view_problem(ask_modal(message)) is None


@pytest.mark.parametrize(
    "state",
    [{"values": []}, {"values": {REQUEST_BLOCK: "x"}}, {"values": {}}, {}],
    ids=["values-not-an-object", "block-not-an-object", "no-request", "no-values"],
)
def test_a_submission_without_a_readable_request_is_malformed(state: dict[str, Any]) -> None:
    """A view_submission whose request cannot be read is refused at the boundary (a 400),
    never a crash."""
    message = QuotedMessage(CHANNEL, "1700000000.000200", AUTHOR, "hi")
    payload = {
        "type": "view_submission",
        "user": {"id": ASKER},
        "view": {
            "id": "V0VIEW00001",
            "callback_id": ASK_VIEW,
            "state": state,
            "private_metadata": write_metadata(message),
        },
    }
    with pytest.raises(MalformedEvent):
        ask_submission(payload)
