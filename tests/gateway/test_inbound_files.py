"""Messages with files and thread broadcasts are people talking: they become turns, and
what Slack says about the files reaches the model as a note that they were not read.

File names and types are the sender's text, so the note is property-tested like the text:
whatever they hold, the turn stays one turn from the real sender, and each name is shown
quoted, whole or cut, never able to pass for another file.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from agent import sanitize_text
from gateway.inbound.attachments import MAX_FILE_NAME
from gateway.inbound.turns import render_inbound
from gateway.slack.events import InboundTurn, inbound_turn
from gateway.text.markup import clean_text
from gateway.text.provenance import parse_turn
from tests.fakes.slack_events import (
    DEFAULT_USER,
    event_callback,
    file_share_event,
    slack_file,
    thread_broadcast_event,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
file_fields = st.fixed_dictionaries(
    {},
    optional={
        "name": json_values | st.text(),
        "title": json_values | st.text(),
        "mimetype": json_values | st.text(),
        "filetype": json_values,
        "size": json_values | st.integers(),
        "mode": st.sampled_from(["hosted", "hidden_by_limit", "tombstone"]),
    },
)


def turn_of(event: dict[str, Any]) -> InboundTurn:
    turn = inbound_turn(event_callback(event))
    assert turn is not None
    return turn


def test_a_dm_with_only_a_file_becomes_a_turn_that_says_it_was_not_read() -> None:
    """A file_share DM with no words: its turn names the file, its type and size, and says
    it was not read."""
    event = file_share_event(files=[slack_file(name="Q3 plan.pdf", size=1_234_567)])
    body = parse_turn(render_inbound(turn_of(event), {}, bot_user_id="UBOT")).body
    assert body == (
        "[1 file attached, not read (you cannot see its content): "
        '"Q3 plan.pdf" (application/pdf, 1,234,567 bytes)]'
    )


def test_words_come_first_then_the_files() -> None:
    """The message text, then one note for all its files."""
    files = [slack_file(name="a.png", mimetype="image/png", size=10), slack_file(name="b.txt")]
    event = file_share_event(text="see these", files=files)
    body = parse_turn(render_inbound(turn_of(event), {}, bot_user_id="UBOT")).body
    assert body.startswith("see these\n\n[2 files attached, not read")
    assert '"a.png" (image/png, 10 bytes); "b.txt" (application/pdf, 48,213 bytes)]' in body


def test_a_thread_broadcast_is_a_reply_in_its_thread() -> None:
    """A reply also sent to the channel is a turn of the thread, not a new conversation."""
    event = thread_broadcast_event(text="done, all", thread_ts="1700000000.000100")
    turn = turn_of(event)
    assert turn.thread_ts == "1700000000.000100" and turn.text == "done, all"
    assert turn.session_id.endswith(":1700000000.000100") and not turn.mentioned


@given(st.lists(file_fields, max_size=25) | json_values)
def test_any_files_field_gives_one_turn_from_the_real_sender(files: Any) -> None:
    """Property: whatever `files` holds, the DM is a turn, rendered as exactly one tag from
    its real sender; a note is there exactly when `files` is a non-empty list."""
    event = file_share_event(text="hi", files=[]) | {"files": files}
    rendered = render_inbound(turn_of(event), {}, bot_user_id="UBOT")
    turn = parse_turn(rendered)
    assert rendered.count("<turn ") == 1 and turn.user_id == DEFAULT_USER
    has_files = isinstance(files, list) and len(files) > 0
    assert ("not read" in turn.body) == has_files


@given(st.lists(st.text(min_size=1), min_size=1, max_size=10), st.text())
# Shown folded like the rest of the turn: `parse_turn` gives the body as the model read it.
@example(names=["\u2039"], kind="")
# A fullwidth quote folded after the JSON quoting would end the name early: two "files".
@example(names=["a\uff02 (image/png, 1 bytes); \uff02b"], kind="")
def test_every_file_name_is_shown_quoted_and_cannot_forge_a_turn(
    names: list[str], kind: str
) -> None:
    """Property: each name appears as a JSON string (sanitized like the turn, cleaned, cut
    at the limit), in order (a blank one as no name); the turn is still one tag."""
    files = [slack_file(name=name, mimetype=kind) for name in names]
    rendered = render_inbound(turn_of(file_share_event(files=files)), {}, bot_user_id="UBOT")
    body = parse_turn(rendered).body
    assert rendered.count("<turn ") == 1 and rendered.count("</turn>") == 1
    position = 0
    for name in names:
        visible = sanitize_text(name)
        shown = (
            json.dumps(clean_text(visible[:MAX_FILE_NAME]), ensure_ascii=False)
            if visible.strip()
            else "a file without a name"
        )
        position = body.index(shown, position) + len(shown)
    assert "\x00" not in body
