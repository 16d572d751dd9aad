"""The App Home tab end to end (issue 45, items 2 and 5): opening it publishes a view of
the person's own task, schedule and usage and nobody else's; its Stop button stops that
task and only the owner's click does; the view is published again when what it shows
changes. Over HTTP and Socket Mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from gateway.slack.home_view import HOME_DELETE, HOME_STOP
from storage import create_schedule
from tests.fakes.openai_api import Gated, reply_with_tool
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_TEAM,
    DEFAULT_USER,
    app_home_opened_event,
    app_mention_event,
    deliver_interaction,
)
from tests.gateway.rig import BOTH, SECRET, Rig
from tests.gateway.test_slash_command import OTHER, schedule_of, send_event
from tests.pg import wait_for_task

USERS = {DEFAULT_USER: "Ada", OTHER: "Grace"}
pytestmark = pytest.mark.rig(
    modes=BOTH, users=USERS, overrides={"THREADGATE_HOME_REFRESH_SECONDS": "0.2"}
)


async def state_of(rig: Rig, task_id: str) -> str:
    return str(await rig.db.pool.fetchval("SELECT state FROM tasks WHERE id = $1", task_id))


def task_of(event: Mapping[str, Any]) -> str:
    return f"{DEFAULT_TEAM}:{event['channel']}:{event['ts']}"


async def click(rig: Rig, payload: dict[str, Any]) -> None:
    """Deliver a click the way the rig's gateway takes interactions; acked."""
    if rig.socket_mode:
        await rig.sockets.wait_for_ack(await rig.sockets.deliver_interactive(payload))
    else:
        status, body = await deliver_interaction(rig.http, rig.events_url, payload, SECRET)
        assert status == 200, body


async def open_home(rig: Rig, user: str) -> None:
    """`user` opens the Home tab; wait for their view."""
    before = len(rig.slack.home.publishes)
    await send_event(rig, app_home_opened_event(channel="D0HOME0001", user=user, tab="home"))
    await rig.slack.wait_until(
        lambda: any(p.user == user for p in rig.slack.home.publishes[before:]),
        what=f"{user}'s Home view",
    )


async def two_working_tasks(rig: Rig, release: asyncio.Event) -> tuple[dict[str, Any], ...]:
    """A task of Ada's and one of Grace's, both waiting on the model."""
    held = Gated(reply_with_tool("final_reply", {"text": "the long answer"}), release, before=0)
    rig.model.script(held, held)
    mine = app_mention_event(text="<@UBOT> mine", user=DEFAULT_USER)
    theirs = app_mention_event(text="<@UBOT> theirs", user=OTHER)
    for n, event in enumerate((mine, theirs), start=1):
        await send_event(rig, event)
        await rig.model.wait_until(lambda n=n: len(rig.model.requests) >= n, what=f"request {n}")
    return mine, theirs


async def test_home_shows_the_persons_own_task_and_schedule_and_its_stop_stops_it(
    rig: Rig,
) -> None:
    """Ada's Home lists her task (with Stop) and her schedule (with Delete), not Grace's;
    Grace pressing Stop with Ada's task id changes nothing (her own Home, published again,
    shows only hers); Ada's Stop stops her task, Grace's goes on, and Ada's view is
    published again without it."""
    release = asyncio.Event()
    mine, theirs = await two_working_tasks(rig, release)
    her_schedule = await create_schedule(rig.db, schedule_of(DEFAULT_USER, "post the notes"))
    their_schedule = await create_schedule(rig.db, schedule_of(OTHER, "their secret plan"))
    await open_home(rig, DEFAULT_USER)
    shown = rig.slack.home.shown(DEFAULT_USER)
    assert f"in <#{DEFAULT_CHANNEL}>" in shown and "post the notes" in shown
    assert "secret plan" not in shown and f"#{their_schedule.id}" not in shown
    assert rig.slack.home.buttons(DEFAULT_USER) == [
        (HOME_STOP, task_of(mine)),
        (HOME_DELETE, her_schedule.id),
    ]
    forged = rig.slack.home.click_home(DEFAULT_USER, HOME_STOP, task_of(mine))
    forged["user"]["id"] = OTHER  # Grace's click on a Stop that is not hers
    await click(rig, forged)
    await rig.slack.wait_until(lambda: OTHER in rig.slack.home.views, what="Grace's Home")
    assert rig.slack.home.buttons(OTHER) == [  # her own Home, published again: hers only
        (HOME_STOP, task_of(theirs)),
        (HOME_DELETE, their_schedule.id),
    ]
    assert await state_of(rig, task_of(mine)) == "running"
    await click(rig, rig.slack.home.click_home(DEFAULT_USER, HOME_STOP, task_of(mine)))
    await wait_for_task(rig.db, task_of(mine), "cancelled")
    await rig.slack.wait_until(
        lambda: "Nothing of yours is working or waiting" in rig.slack.home.shown(DEFAULT_USER),
        what="Ada's Home without her stopped task",
    )
    release.set()
    await wait_for_task(rig.db, task_of(theirs), "done")
    actors = await rig.db.pool.fetch("SELECT task_id, actor FROM task_interventions")
    assert [(a["task_id"], a["actor"]) for a in actors] == [
        (task_of(mine), f"slack:{DEFAULT_USER}")
    ]


async def test_the_delete_button_deletes_the_persons_schedule(rig: Rig) -> None:
    """Delete on the Home removes that schedule, and the view shows it gone."""
    schedule = await create_schedule(rig.db, schedule_of(DEFAULT_USER, "post the notes"))
    await open_home(rig, DEFAULT_USER)
    await click(rig, rig.slack.home.click_home(DEFAULT_USER, HOME_DELETE, schedule.id))
    await rig.slack.wait_until(
        lambda: "You have no schedules." in rig.slack.home.shown(DEFAULT_USER),
        what="the Home without the schedule",
    )
    assert await rig.count("schedules") == 0


async def test_a_task_that_starts_while_home_is_open_appears_on_it(rig: Rig) -> None:
    """The view is published again when the person's work changes while it is open."""
    await open_home(rig, DEFAULT_USER)
    assert "Nothing of yours is working" in rig.slack.home.shown(DEFAULT_USER)
    release = asyncio.Event()
    await two_working_tasks(rig, release)
    await rig.slack.wait_until(
        lambda: "*working* in" in rig.slack.home.shown(DEFAULT_USER),
        what="Ada's Home showing her new task",
    )
    release.set()
    await rig.slack.wait_until(
        lambda: "Nothing of yours is working" in rig.slack.home.shown(DEFAULT_USER),
        what="Ada's Home once her task is done",
    )
    assert len(rig.slack.home.buttons(DEFAULT_USER)) == 0
