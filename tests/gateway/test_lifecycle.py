"""Edits and deletions of Slack messages, end to end: the conversation follows them, and
nothing is answered twice (issue 12, item 2)."""

from __future__ import annotations

from typing import Any

import pytest

from storage import TOMBSTONE
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_TEAM,
    DEFAULT_USER,
    app_mention_event,
    event_callback,
    message_changed_event,
    message_deleted_event,
    message_event,
)
from tests.gateway.rig import BOTH, Rig
from tests.gateway.test_files_end_to_end import png

pytestmark = pytest.mark.rig(modes=BOTH, users={DEFAULT_USER: "Ada"})


async def send(rig: Rig, envelope: dict[str, Any]) -> int:
    """Deliver the envelope the way the rig's gateway takes events; the ack's HTTP status."""
    if not rig.socket_mode:
        return (await rig.send(envelope))[0]
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(envelope))
    return 200


def user_texts(rig: Rig, request: int) -> list[str]:
    return [
        str(m["content"])
        for m in rig.model.requests[request].body["messages"]
        if m.get("role") == "user"
    ]


async def answer_elsewhere(rig: Rig, posts_before: int) -> None:
    """A fresh mention in another channel, answered: every event sent before it was
    handled (one worker answers in order of admission), so "nothing more" can be checked."""
    await send(rig, event_callback(app_mention_event(text="<@UBOT> ping", channel="C0OTHER001")))
    await rig.slack.wait_for_posts(posts_before + 1)


async def test_an_edit_that_adds_a_mention_is_answered_once(rig: Rig) -> None:
    """A channel message edited to mention the bot is answered once; the redelivered edit
    and a second edit answer nothing more."""
    plain = message_event(text="what is 2+2?")
    assert await send(rig, event_callback(plain)) == 200
    edit = event_callback(
        message_changed_event(
            ts=plain["ts"], new_text="<@UBOT> what is 2+2?", old_text="what is 2+2?"
        )
    )
    assert await send(rig, edit) == 200
    posts = await rig.slack.wait_for_posts(1)
    assert posts[0].thread_ts == plain["ts"] and "what is 2+2?" in posts[0].text
    assert 'edited="' in user_texts(rig, 0)[-1]
    again = message_changed_event(
        ts=plain["ts"], new_text="<@UBOT> what is 3+3?", old_text="<@UBOT> what is 2+2?"
    )
    assert await send(rig, edit) == 200
    assert await send(rig, event_callback(again)) == 200
    await answer_elsewhere(rig, 1)
    assert len(rig.slack.posts) == 2 and len(rig.model.requests) == 2


async def test_an_edit_of_an_answered_turn_changes_history_not_the_answer(rig: Rig) -> None:
    """The next model request reads the edited words (marked edited); the edited turn is
    not answered a second time."""
    first = app_mention_event(text="<@UBOT> the colour is blue")
    await send(rig, event_callback(first))
    await rig.slack.wait_for_posts(1)
    edit = message_changed_event(
        ts=first["ts"],
        new_text="<@UBOT> the colour is green",
        old_text="<@UBOT> the colour is blue",
    )
    assert await send(rig, event_callback(edit)) == 200
    follow = app_mention_event(text="<@UBOT> which colour?", thread_ts=first["ts"])
    await send(rig, event_callback(follow))
    await rig.slack.wait_for_posts(2)
    turns = user_texts(rig, 1)
    assert "the colour is green" in turns[0] and 'edited="' in turns[0]
    assert not any("blue" in t for t in turns)
    await answer_elsewhere(rig, 2)
    assert len(rig.model.requests) == 3  # the edit asked the model nothing


async def test_deleting_a_queued_turn_cancels_its_task(rig: Rig) -> None:
    """A message deleted while it waits its turn is never answered; nothing is posted for
    it, and the thread's next message is answered."""
    gate = rig.slack.hold("chat.postMessage")
    first = app_mention_event(text="<@UBOT> first")
    await send(rig, event_callback(first))
    second = app_mention_event(text="<@UBOT> second", thread_ts=first["ts"])
    await send(rig, event_callback(second))
    deleted = message_deleted_event(
        ts=second["ts"], old_text="<@UBOT> second", thread_ts=first["ts"]
    )
    assert await send(rig, event_callback(deleted)) == 200
    task = f"{DEFAULT_TEAM}:{DEFAULT_CHANNEL}:{second['ts']}"
    row = await rig.db.pool.fetchrow(
        "SELECT t.state, i.actor FROM tasks t JOIN task_interventions i ON i.task_id = t.id "
        "WHERE t.id = $1",
        task,
    )
    assert row is not None and (row["state"], row["actor"]) == (
        "cancelled",
        "slack:message_deleted",
    )
    gate.set()
    third = app_mention_event(text="<@UBOT> third", thread_ts=first["ts"])
    await send(rig, event_callback(third))
    posts = await rig.slack.wait_for_posts(2)
    assert ["first" in posts[0].text, "third" in posts[1].text] == [True, True]
    assert not any("second" in p.text for p in posts)
    assert len(rig.model.requests) == 2


async def test_a_deleted_turn_is_gone_from_the_next_model_request(rig: Rig) -> None:
    """After a deletion the model reads a tombstone where the words were."""
    first = app_mention_event(text="<@UBOT> my password is hunter2")
    await send(rig, event_callback(first))
    await rig.slack.wait_for_posts(1)
    deleted = message_deleted_event(ts=first["ts"], old_text=first["text"])
    assert await send(rig, event_callback(deleted)) == 200
    follow = app_mention_event(text="<@UBOT> thanks", thread_ts=first["ts"])
    await send(rig, event_callback(follow))
    await rig.slack.wait_for_posts(2)
    turns = user_texts(rig, 1)
    assert not any("hunter2" in t for t in turns)
    assert any(TOMBSTONE.rendered() in t for t in turns)
    stored = await rig.db.pool.fetchval(
        "SELECT string_agg(text, ' ') FROM messages WHERE role = 'user'"
    )
    assert "hunter2" not in stored


async def test_a_deleted_messages_picture_is_never_sent_to_a_model_again(rig: Rig) -> None:
    """A picture shown with a mention, then the mention deleted: the thread's next request
    carries no picture, and none is stored."""
    picture = png()
    file = rig.slack.files.add_file("secret.png", picture, mimetype="image/png")
    first = app_mention_event(text="<@UBOT> what is this?") | {"files": [file]}
    await send(rig, event_callback(first))
    await rig.slack.wait_for_posts(1)
    assert rig.model.requests[0].images() == [("image/png", picture)]
    deleted = message_deleted_event(ts=first["ts"], old_text=first["text"])
    assert await send(rig, event_callback(deleted)) == 200
    follow = app_mention_event(text="<@UBOT> and now?", thread_ts=first["ts"])
    await send(rig, event_callback(follow))
    await rig.slack.wait_for_posts(2)
    assert any(TOMBSTONE.rendered() in t for t in user_texts(rig, 1))
    assert rig.model.requests[1].images() == []
    assert await rig.count("message_attachments") == 0


async def test_edits_of_bot_messages_and_unknown_messages_are_acked_quietly(rig: Rig) -> None:
    """Our own posts' edits, and edits of messages we never stored, change nothing."""
    first = app_mention_event(text="<@UBOT> hi")
    await send(rig, event_callback(first))
    post = (await rig.slack.wait_for_posts(1))[0]
    ours = message_changed_event(ts=post.ts, new_text="changed", old_text=post.text, user="UBOT")
    ours["message"]["bot_id"] = "B0OURBOT01"
    unknown = message_changed_event(ts="1700000000.000001", new_text="b", old_text="a")
    before = await rig.db.pool.fetch("SELECT id, text FROM messages ORDER BY seq")
    assert await send(rig, event_callback(ours)) == 200
    assert await send(rig, event_callback(unknown)) == 200
    assert await rig.db.pool.fetch("SELECT id, text FROM messages ORDER BY seq") == before


@pytest.mark.parametrize(
    "broken",
    [
        {"message": "not an object"},
        {"message": {"ts": "yesterday", "user": "U0A1B2C3D4E", "text": "x"}},
        {"channel": 12},
        {"message": {"ts": "1700000000.000100", "user": ["U1"], "text": "x"}},
    ],
)
@pytest.mark.rig()
async def test_malformed_edits_get_400(rig: Rig, broken: dict[str, Any]) -> None:
    """A message_changed payload without what it must have is refused with a 400."""
    event = message_changed_event(ts="1700000000.000100", new_text="a", old_text="b") | broken
    status, body = await rig.send(event_callback(event))
    assert status == 400, body
