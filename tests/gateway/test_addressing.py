"""Whom a thread reply speaks to (gateway/inbound/addressing.py), property-tested, and the
bot staying quiet end to end when people talk to each other in its thread (issue 31, item 4)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.inbound.addressing import addresses_someone_else, opening_mention
from gateway.text.markup import mentioned_user_ids
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    app_mention_event,
    event_callback,
    message_event,
)
from tests.gateway.rig import BOTH, Rig

BOT = "UBOT"

user_ids = st.from_regex(r"[UW][A-Z0-9]{2,10}", fullmatch=True).filter(lambda u: u != BOT)
names = st.text(st.characters(blacklist_characters="<>|"), max_size=12)
space = st.text(" \t\n\u00a0\u2003", max_size=4)
# Free text that cannot itself spell a mention (no `<`).
words = st.text(st.characters(blacklist_characters="<"), max_size=40)


@st.composite
def mentions(draw: st.DrawFn, user: st.SearchStrategy[str] = user_ids) -> str:
    """A user mention in any of Slack's forms: `<@U…>` or `<@U…|name>`."""
    who = draw(user)
    label = draw(st.none() | names)
    return f"<@{who}>" if label is None else f"<@{who}|{label}>"


@given(space, st.lists(mentions(), min_size=1, max_size=4), words)
def test_a_reply_opening_with_other_people_is_theirs(
    lead: str, others: list[str], rest: str
) -> None:
    """After any leading whitespace, one or several mentions of other people open the reply:
    it is someone else's."""
    text = lead + " ".join(others) + rest
    assert addresses_someone_else(text, BOT)


@given(space, st.lists(mentions(), max_size=3), mentions(st.just(BOT)), words, words)
def test_a_reply_naming_the_bot_anywhere_is_the_bots(
    lead: str, others: list[str], bot: str, before: str, after: str
) -> None:
    """The bot's own id anywhere in the reply, in any form, makes it the bot's."""
    text = lead + " ".join(others) + before + bot + after
    assert not addresses_someone_else(text, BOT)


@given(words.filter(lambda w: w.strip() != ""), st.lists(mentions(), max_size=3))
def test_a_mention_after_the_opening_does_not_address(opening: str, later: list[str]) -> None:
    """A reply that opens with words speaks about people, not to them: the bot answers."""
    text = opening.lstrip() + " " + " ".join(later)
    assert opening_mention(text) is None
    assert not addresses_someone_else(text, BOT)


@given(space, mentions(), words)
def test_without_the_bots_id_an_opening_mention_is_someone_elses(
    lead: str, mention: str, rest: str
) -> None:
    """When the bot's id is unknown, an opening mention is taken as someone else's."""
    assert addresses_someone_else(lead + mention + rest, None)


@given(st.text(max_size=80))
def test_any_text_is_decided(text: str) -> None:
    """Any text at all is decided without an error: someone else's exactly when it opens
    with a mention and never names the bot; adding the bot's mention makes it the bot's."""
    expected = opening_mention(text) is not None and BOT not in mentioned_user_ids(text)
    assert addresses_someone_else(text, BOT) is expected
    assert not addresses_someone_else(text + f"<@{BOT}>", BOT)


def test_the_forms_slack_writes() -> None:
    """Slack's plain and labelled mention forms, leading newlines, several mentions."""
    assert opening_mention("<@U2> hi") == "U2"
    assert opening_mention("\n  <@U2|ada> hi") == "U2"
    assert addresses_someone_else("<@U2> <@U3|bo> can you two look?", BOT)
    assert not addresses_someone_else("<@U2> and <@UBOT|threadgate>: thoughts?", BOT)
    assert not addresses_someone_else("thanks <@U2>", BOT)
    assert not addresses_someone_else("", BOT)


# -- end to end ------------------------------------------------------------------------------

OTHER = "U0OTHER0001"


async def send(rig: Rig, envelope: dict[str, Any]) -> int:
    """Deliver the envelope the way the rig's gateway takes events; the ack's HTTP status."""
    if not rig.socket_mode:
        return (await rig.send(envelope))[0]
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(envelope))
    return 200


def reply(text: str, thread_ts: str) -> dict[str, Any]:
    return event_callback(
        message_event(text=text, user=DEFAULT_USER, channel=DEFAULT_CHANNEL, thread_ts=thread_ts)
    )


@pytest.mark.rig(modes=BOTH, users={DEFAULT_USER: "Ada", OTHER: "Bo"})
async def test_people_talking_to_each_other_in_the_bots_thread_are_left_alone(rig: Rig) -> None:
    """In the bot's thread, a reply opening with someone else's mention makes no task and no
    model request; the next reply that mentions the bot is answered."""
    root = app_mention_event(text="<@UBOT> hello")
    await send(rig, event_callback(root))
    await rig.slack.wait_for_posts(1)
    tasks, requests = await rig.count("tasks"), len(rig.model.requests)
    assert await send(rig, reply(f"  <@{OTHER}|bo> can you check the logs?", root["ts"])) == 200
    assert await send(rig, reply(f"<@{OTHER}> <@U0THIRD001> ping", root["ts"])) == 200
    assert await send(rig, reply(f"<@{OTHER}> what does <@UBOT> think?", root["ts"])) == 200
    posts = await rig.slack.wait_for_posts(2)
    assert "what does" in posts[1].text and posts[1].thread_ts == root["ts"]
    assert await rig.count("tasks") == tasks + 1
    assert len(rig.model.requests) == requests + 1
    assert len(rig.slack.posts) == 2
