"""The guard rails end to end: a whole gateway, fake Slack, fake model, real Postgres.

An over-limit message is acked (200: Slack must not send it again) and costs nothing: the
first of its window is answered by one notice, the rest leave no task behind. Whether a
message left a task is what tells a test that nothing more can be posted for it, so no
test waits for something not to happen.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from gateway.inbound.gatekeeper import LIMIT_NOTICES
from tests.fakes.openai_api import reply_with_tool
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_TEAM,
    app_mention_event,
    event_callback,
    message_event,
)
from tests.gateway.rig import Rig, echo
from tests.pg import wait_for_task

OTHER_USER = "U0OTHERUSR1"
INTEGRATION = "U0INTEGRAT1"  # an integration posting with a user token: not a bot event


def task_id(event: Mapping[str, str]) -> str:
    return f"{DEFAULT_TEAM}:{event['channel']}:{event['ts']}"


async def has_task(rig: Rig, event: Mapping[str, str]) -> bool:
    return bool(await rig.db.pool.fetchval("SELECT true FROM tasks WHERE id = $1", task_id(event)))


async def metrics(rig: Rig) -> str:
    async with rig.http.get(rig.metrics_url) as response:
        return await response.text()


@pytest.mark.rig(overrides={"THREADGATE_USER_MESSAGES_PER_HOUR": "2"})
async def test_a_user_past_the_hourly_limit_gets_one_notice_and_others_are_answered(
    rig: Rig,
) -> None:
    mine = [app_mention_event(text=f"<@UBOT> question {n}") for n in range(4)]
    theirs = app_mention_event(text="<@UBOT> mine too", user=OTHER_USER)
    statuses = [(await rig.send(event_callback(e)))[0] for e in [*mine, theirs]]
    assert statuses == [200] * 5
    # Two answers, one notice (for the third), the other user's answer; the fourth left
    # no task, so nothing can ever be posted for it.
    assert [await has_task(rig, e) for e in mine] == [True, True, True, False]
    posts = await rig.slack.wait_for_posts(4)
    by_thread = {p.thread_ts: p.text for p in posts}
    assert by_thread[mine[2]["ts"]] == LIMIT_NOTICES["user"]
    assert "question 0" in by_thread[mine[0]["ts"]] and "question 1" in by_thread[mine[1]["ts"]]
    assert "mine too" in by_thread[theirs["ts"]]
    await wait_for_task(rig.db, task_id(mine[2]), "done")
    assert len(rig.model.requests) == 3  # the notice cost no model request
    text = await metrics(rig)
    assert 'threadgate_limited_messages_total{scope="user"} 2.0' in text
    assert 'threadgate_events_total{outcome="limited"} 2.0' in text


@pytest.mark.rig(overrides={"THREADGATE_THREAD_MESSAGES_PER_HOUR": "3"})
async def test_an_integration_answering_every_bot_post_is_stopped_by_the_thread_limit(
    rig: Rig,
) -> None:
    """The loop breaker: an integration replies to each of our posts in the thread; the
    thread limit answers one message with a notice, and its reply to that is not answered."""
    first = app_mention_event(text="<@UBOT> start", user=INTEGRATION)
    thread = first["ts"]
    await rig.send(event_callback(first))
    sent, latest = 1, first
    while await has_task(rig, latest) and sent < 20:
        posts = await rig.slack.wait_for_posts(sent)
        latest = message_event(
            text=f"re: {posts[-1].text[:20]}", user=INTEGRATION, thread_ts=thread
        )
        assert (await rig.send(event_callback(latest)))[0] == 200
        sent += 1
    # Three answers, the notice, and the integration's answer to the notice left no task.
    assert sent == 5
    posts = [p for p in rig.slack.posts if (p.channel, p.thread_ts) == (DEFAULT_CHANNEL, thread)]
    assert len(posts) == 4 and posts[-1].text == LIMIT_NOTICES["thread"]
    assert 'threadgate_limited_messages_total{scope="thread"} 2.0' in await metrics(rig)


@pytest.mark.rig(overrides={"THREADGATE_MAX_MODEL_REQUESTS_PER_TASK": "4"})
async def test_a_task_whose_model_keeps_calling_tools_stops_at_the_request_cap(rig: Rig) -> None:
    """One notice says the message used up its allowance; the thread's next message is
    answered."""
    rig.model.default = lambda seen: reply_with_tool("current_time", {})
    first = app_mention_event(text="<@UBOT> loop forever")
    await rig.send(event_callback(first))
    [notice] = await rig.slack.wait_for_posts(1)
    assert "allowance" in notice.text and notice.thread_ts == first["ts"]
    await wait_for_task(rig.db, task_id(first), "failed")
    assert len(rig.model.requests) == 4
    assert (
        await rig.db.pool.fetchval("SELECT model_requests FROM tasks WHERE id = $1", task_id(first))
        == 4
    )
    rig.model.default = echo
    nxt = message_event(text="<@UBOT> something short", thread_ts=first["ts"])
    await rig.send(event_callback(nxt))
    posts = await rig.slack.wait_for_posts(2)
    assert "something short" in posts[-1].text
    assert 'threadgate_tasks_total{outcome="request_cap"} 1.0' in await metrics(rig)


# The fake model reports 10 input and 5 output tokens per answer.
@pytest.mark.rig(overrides={"THREADGATE_USER_DAILY_TOKENS": "15"})
async def test_a_user_over_the_daily_token_budget_gets_the_notice_instead_of_an_answer(
    rig: Rig,
) -> None:
    first = app_mention_event(text="<@UBOT> first")
    await rig.send(event_callback(first))
    await wait_for_task(rig.db, task_id(first), "done")
    usage = await rig.db.pool.fetch(
        "SELECT scope, key, input_tokens, output_tokens FROM usage_daily ORDER BY scope"
    )
    assert [tuple(r) for r in usage] == [
        ("channel", f"{DEFAULT_TEAM}:{DEFAULT_CHANNEL}", 10, 5),
        ("user", f"{DEFAULT_TEAM}:{first['user']}", 10, 5),
        ("workspace", DEFAULT_TEAM, 10, 5),
    ]
    second = app_mention_event(text="<@UBOT> second")
    theirs = app_mention_event(text="<@UBOT> someone else", user=OTHER_USER)
    await rig.send(event_callback(second))
    await rig.send(event_callback(theirs))
    posts = await rig.slack.wait_for_posts(3)
    by_thread = {p.thread_ts: p.text for p in posts}
    assert by_thread[second["ts"]] == LIMIT_NOTICES["user_tokens"]
    assert "someone else" in by_thread[theirs["ts"]]
    assert len(rig.model.requests) == 2
    text = await metrics(rig)
    assert 'threadgate_limited_messages_total{scope="user_tokens"} 1.0' in text
    # Tokens by direction and model (no user or channel labels: too many series).
    assert any(
        line.startswith("threadgate_model_tokens_total{")
        and 'kind="input"' in line
        and 'model="openai:gpt-test"' in line
        and line.endswith(" 20.0")
        for line in text.splitlines()
    )
