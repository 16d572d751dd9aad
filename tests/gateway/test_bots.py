"""Bots (gateway/inbound/bots.py): answered only where THREADGATE_ALLOW_BOTS says, our own
never, and never in an unbounded loop: past THREADGATE_BOT_TURNS_PER_THREAD in a thread a
bot gets silence and the operators one alert, the count shared by every replica."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config.settings import load_settings
from gateway.operator.doctor import check_bots
from gateway.slack.bot_policy import BotPolicy
from tests.fakes.slack_events import app_mention_event, deliver, event_callback
from tests.gateway.rig import BOTH, SECRET, Rig
from tests.pg import wait_for_task

OTHER_BOT, OTHER_BOT_USER = "B0OTHERBOT1", "U0OTHERBOT1"
BOUND = 3


def bot_mention(
    text: str, *, bot: str = OTHER_BOT, user: str = OTHER_BOT_USER, **kw: Any
) -> dict[str, Any]:
    """An `app_mention` written by a bot, as Slack sends it: its `bot_id`, its bot user
    and its `bot_profile` (bolt-python's test payloads, tests/gateway/slack_payloads)."""
    event = app_mention_event(text=text, user=user, **kw)
    profile = {"id": bot, "app_id": "A0OTHERAPP1", "name": "other-agent", "team_id": "T1"}
    return event | {"bot_id": bot, "bot_profile": profile}


def task_of(event: dict[str, Any]) -> str:
    return f"T1:{event['channel']}:{event['ts']}"


async def send(rig: Rig, envelope: dict[str, Any], url: str | None = None) -> int:
    """Deliver as the rig's gateway takes events (or over HTTP to `url`); the ack's status."""
    if url is not None:
        return (await deliver(rig.http, url, envelope, SECRET))[0]
    if not rig.socket_mode:
        return (await rig.send(envelope))[0]
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(envelope))
    return 200


def alerts(rig: Rig) -> list[str]:
    return [p.text for p in rig.slack.posts if p.channel == "COPS"]


@pytest.mark.rig(
    overrides={"THREADGATE_ALLOW_BOTS": "mentions", "THREADGATE_BOT_TURNS_PER_THREAD": str(BOUND)}
)
async def test_two_bots_mentioning_each_other_stop_after_the_bound_with_one_alert(
    rig: Rig,
) -> None:
    """Another agent answers each of our replies with a new mention, its deliveries spread
    over two replicas: the first BOUND turns of the thread are answered, the rest get no
    task and no reply, and the operators get exactly one alert naming the setting."""
    replica = await rig.start_gateway(socket_mode=False)
    urls = [rig.events_url, f"http://127.0.0.1:{replica.port}/slack/events"]
    first = bot_mention("<@UBOT> what do you think?")
    thread = first["ts"]
    for turn in range(BOUND):
        event = first if turn == 0 else bot_mention(f"<@UBOT> and {turn}?", thread_ts=thread)
        assert await send(rig, event_callback(event), urls[turn % 2]) == 200
        await wait_for_task(rig.db, task_of(event), "done")
    for turn in range(BOUND, BOUND + 4):
        late = bot_mention(f"<@UBOT> and {turn}?", thread_ts=thread)
        assert await send(rig, event_callback(late), urls[turn % 2]) == 200
    await rig.slack.wait_until(lambda: len(alerts(rig)) >= 1, what="the loop alert")
    assert await rig.count("tasks") == BOUND
    replies = [p for p in rig.slack.posts if p.thread_ts == thread]
    assert len(replies) == BOUND
    (alert,) = alerts(rig)
    assert "THREADGATE_BOT_TURNS_PER_THREAD" in alert and OTHER_BOT in alert
    # A redelivery of a silenced turn stays silent and does not alert again.
    assert await send(rig, event_callback(late), urls[0]) == 200
    assert await rig.count("tasks") == BOUND and len(alerts(rig)) == 1


@pytest.mark.rig(modes=BOTH)
async def test_by_default_no_bot_is_answered_and_people_still_are(rig: Rig) -> None:
    """With THREADGATE_ALLOW_BOTS unset, a bot's mention gets no task; a person's does."""
    ignored = bot_mention("<@UBOT> hello from a bot")
    assert await send(rig, event_callback(ignored)) == 200
    person = app_mention_event(text="<@UBOT> hello from a person")
    assert await send(rig, event_callback(person)) == 200
    await wait_for_task(rig.db, task_of(person), "done")
    assert await rig.count("tasks") == 1


@pytest.mark.rig(overrides={"THREADGATE_ALLOW_BOTS": "B0LISTED001"})
async def test_a_listed_bot_is_answered_and_our_own_bot_never(rig: Rig) -> None:
    """With a list, only the listed bot's mention is answered; our own bot's post (its
    bot user) is never answered, whatever the list says."""
    listed = bot_mention("<@UBOT> listed", bot="B0LISTED001", user="U0LISTED001")
    unlisted = bot_mention("<@UBOT> not listed", bot="B0UNLISTED1", user="U0UNLISTED1")
    own = bot_mention("<@UBOT> myself", bot="B0LISTED001", user="UBOT")
    for event in (unlisted, own, listed):
        assert await send(rig, event_callback(event)) == 200
    await wait_for_task(rig.db, task_of(listed), "done")
    tasks = await rig.db.pool.fetch("SELECT id FROM tasks")
    assert [t["id"] for t in tasks] == [task_of(listed)]


@pytest.mark.parametrize(
    ("value", "policy"),
    [
        ("none", BotPolicy()),
        ("Mentions", BotPolicy("mentions")),
        ("B0A, B0B B0C", BotPolicy("listed", frozenset({"B0A", "B0B", "B0C"}))),
    ],
)
def test_the_setting_reads_none_mentions_or_bot_ids(value: str, policy: BotPolicy) -> None:
    """THREADGATE_ALLOW_BOTS: none, mentions (any case), or bot ids by commas or spaces."""
    assert BotPolicy.parse(value) == policy


@pytest.mark.parametrize("value", ["", "all", "U0PERSON1", "B0A, nope"])
def test_anything_else_is_refused_saying_what_to_write(value: str) -> None:
    """A value that is neither is a ValueError naming the three forms."""
    with pytest.raises(ValueError, match="none, mentions, or a comma-separated list of bot ids"):
        BotPolicy.parse(value)


def test_doctor_says_which_bots_are_answered_and_warns_without_an_operator_channel() -> None:
    """`doctor`'s bots line: ok with none allowed; with bots allowed it gives the bound, and
    warns when a loop's alert would reach no operator channel."""
    base = {"env_file": None, "slack_bot_token": "xoxb-1"}
    assert check_bots(load_settings(**base)).status == "ok"
    allowed = {**base, "threadgate_allow_bots": "mentions", "threadgate_bot_turns_per_thread": "4"}
    told = check_bots(load_settings(**allowed, threadgate_operator_channel="COPS"))
    assert told.status == "ok" and "at most 4 bot turn(s)" in told.detail
    untold = check_bots(load_settings(**allowed))
    assert untold.status == "warn" and "THREADGATE_OPERATOR_CHANNEL" in untold.detail
