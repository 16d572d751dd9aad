"""One `serve` process: the ingress on a thread and event loop of its own (issue 36)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent import ConfigError
from tests.fakes.slack_events import DEFAULT_USER, app_mention_event, deliver, event_callback
from tests.gateway.rig import BOTH, SECRET, Rig

pytestmark = pytest.mark.rig(users={DEFAULT_USER: "Ada"})

# How long the test holds the workers' loop at most: the ack must come well within it.
HOLD_SECONDS = 30.0


def deliver_from_another_thread(
    url: str, envelope: dict[str, Any]
) -> tuple[threading.Event, list[int]]:
    """POST `envelope` from a thread of its own (its own loop and HTTP client); the event
    is set once the response arrived, its status in the list."""
    answered, statuses = threading.Event(), []

    async def send() -> None:
        async with aiohttp.ClientSession() as http:
            statuses.append((await deliver(http, url, envelope, SECRET))[0])

    def run() -> None:
        try:
            asyncio.run(send())
        finally:
            answered.set()

    threading.Thread(target=run, name="slack-delivery", daemon=True).start()
    return answered, statuses


async def test_an_ack_is_sent_while_the_workers_loop_is_held(rig: Rig) -> None:
    """With the workers' event loop held (as a burst of reply work holds it), an event is
    still verified, committed and acked, and answered once the loop is free."""
    first = app_mention_event(text="<@UBOT> warm the names up")
    assert (await rig.send(event_callback(first)))[0] == 200
    await rig.slack.wait_for_posts(1)
    second = app_mention_event(text="<@UBOT> answered after the hold")
    answered, statuses = deliver_from_another_thread(rig.events_url, event_callback(second))
    # The test runs on the loop the in-process gateway's workers run on (and the fakes'):
    # waiting on a threading.Event here holds that loop until the ack arrives.
    acked_while_held = answered.wait(HOLD_SECONDS)
    assert acked_while_held and statuses == [200]
    posts = await rig.slack.wait_for_posts(2)
    assert "answered after the hold" in posts[1].text
    assert posts[1].thread_ts == second["ts"]


@pytest.mark.rig(modes=BOTH, overrides={"THREADGATE_INGRESS_THREAD": "false"})
async def test_one_loop_for_both_still_answers(rig: Rig) -> None:
    """THREADGATE_INGRESS_THREAD=false: ingress and workers share the main loop, and a
    mention is answered once, in HTTP mode and Socket Mode."""
    event = app_mention_event(text="<@UBOT> one loop")
    if rig.socket_mode:
        await rig.sockets.wait_for_ack(await rig.sockets.deliver(event_callback(event)))
    else:
        assert (await rig.send(event_callback(event)))[0] == 200
    posts = await rig.slack.wait_for_posts(1)
    assert len(posts) == 1 and "one loop" in posts[0].text
    assert not any(t.name == "threadgate-ingress" for t in threading.enumerate())


@pytest.mark.rig(modes=BOTH)
async def test_the_ingress_thread_ends_with_the_gateway(rig: Rig) -> None:
    """The default: the ingress runs on its own thread while the gateway serves, in both
    modes, and the thread is gone once the gateway stopped."""
    assert any(t.name == "threadgate-ingress" for t in threading.enumerate())
    extra = await rig.start_gateway(socket_mode=rig.socket_mode)
    threads = [t for t in threading.enumerate() if t.name == "threadgate-ingress"]
    assert len(threads) == 2
    await extra.stop()
    rig.replicas.remove(extra)
    assert [t.is_alive() for t in threads].count(False) == 1


async def lag_counts(rig: Rig, loop: str) -> tuple[float, float]:
    """(wake-ups observed, of them at most half a second late) on `loop`'s lag watch."""
    async with rig.http.get(rig.metrics_url) as response:
        text = await response.text()
    total = within = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "threadgate_event_loop_lag_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("loop") != loop:
                continue
            if sample.name.endswith("_count"):
                total = sample.value
            elif sample.name.endswith("_bucket") and sample.labels.get("le") == "0.5":
                within = sample.value
    return total, within


async def test_a_held_workers_loop_shows_in_its_lag_and_not_in_the_ingress(rig: Rig) -> None:
    """Holding the workers' loop for a second shows as a wake-up over half a second late in
    `threadgate_event_loop_lag_seconds{loop="workers"}` (its timer was due within 0.25 s
    of the hold's start); the ingress's loop woke on time meanwhile."""
    threading.Event().wait(1.0)  # holds this loop, the workers' (the test's stimulus)
    async with asyncio.timeout(10):  # the watch notes its late wake-up at its next turn
        while (counts := await lag_counts(rig, "workers"))[0] - counts[1] < 1:  # noqa: ASYNC110 - a scrape, polled
            await asyncio.sleep(0.05)
    ingress_total, ingress_within = await lag_counts(rig, "ingress")
    assert ingress_total >= 1 and ingress_within == ingress_total


@pytest.mark.rig(overrides={"THREADGATE_DB_CONNECTIONS": "3"})
async def test_db_connections_bound_the_pool_and_a_mention_is_still_answered(rig: Rig) -> None:
    """THREADGATE_DB_CONNECTIONS=3: the workers' pool opens at most 3 (as /metrics says),
    and a mention is answered through it."""
    assert (await rig.send(event_callback(app_mention_event(text="<@UBOT> small pool"))))[0] == 200
    [post] = await rig.slack.wait_for_posts(1)
    assert "small pool" in post.text
    async with rig.http.get(rig.metrics_url) as response:
        text = await response.text()
    assert 'threadgate_db_pool_connections{state="max"} 3.0' in text.splitlines()


async def test_a_start_that_fails_ends_the_ingress_thread_launched_beside_it(rig: Rig) -> None:
    """The ingress is launched beside the workers' start; when that start fails (Slack
    refuses the token), the ingress thread ends with it, whatever point it had reached."""
    before = [t for t in threading.enumerate() if t.name == "threadgate-ingress"]
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN was refused"):
        await rig.start_gateway(socket_mode=False, overrides={"SLACK_BOT_TOKEN": "xoxb-wrong"})
    after = [t for t in threading.enumerate() if t.name == "threadgate-ingress"]
    assert after == before and len(after) == 1
