"""Schedules with a real gateway: each period posts once where the schedule says — the top
of a channel (a new thread per run), a thread, a person's DM — and `threadgate schedules`
steers them from the next period on; a run with nothing to say posts nothing; a channel
that is gone pauses its schedule and tells the operators; people make, list and delete
their own schedules by asking the bot."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent import recur_every, recur_once
from gateway.slack.interactive import APPROVE
from storage import NewSchedule, create_schedule, get_schedule, list_schedules
from tests.fakes.openai_api import RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_api import Post
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    app_mention_event,
    deliver,
    deliver_interaction,
    event_callback,
)
from tests.gateway.rig import SECRET, STREAMING, Rig, gateway_env, last_user_text
from tests.gateway.schedules_help import (
    add_schedule,
    cli,
    digest_model,
    digests,
    periods,
    runs_settled,
    schedule_run,
)

# Periods of a couple of seconds keep the suite fast; the minute-long scenario is in
# tests/chaos/test_schedules.py.
FAST = {
    "THREADGATE_SCHEDULE_MIN_PERIOD_SECONDS": "1",
    "THREADGATE_PERSON_SCHEDULE_MIN_PERIOD_SECONDS": "1",
}
pytestmark = pytest.mark.rig(overrides=FAST)


def env_of(rig: Rig) -> dict[str, str]:
    return gateway_env(rig.slack, rig.model, rig.database_url) | FAST


async def test_a_channel_schedule_posts_once_per_period_at_the_top_of_the_channel(
    rig: Rig, tmp_path: Path
) -> None:
    """`schedules add --every 2s` posts one digest per period, each a new top-level post
    in the channel (no thread_ts), and `schedules list` shows its last run and outcome."""
    rig.model.default = digest_model()
    env = env_of(rig)
    created = await add_schedule(
        env,
        tmp_path,
        "--team",
        "T1",
        "--channel",
        "C0DIGEST01",
        "--every",
        "2s",
        "--prompt",
        "Summarize the channel",
    )
    await rig.slack.wait_until(
        lambda: len(digests(rig.slack, created["id"])) >= 2, 30, what="two digests"
    )
    made = digests(rig.slack, created["id"])
    assert all(p.channel == "C0DIGEST01" and p.thread_ts is None for p in made)
    assert set(periods(made).values()) == {1}
    await cli(env, tmp_path, "schedules", "pause", created["id"])
    await runs_settled(rig.db, created["id"])
    listing = await cli(env, tmp_path, "schedules", "list")
    [row] = [line for line in listing.splitlines() if line.startswith(created["id"] + " ")]
    assert "paused" in row and "every 2s" in row and "posted" in row, listing


async def test_pause_resume_and_delete_take_effect_on_the_next_period(
    rig: Rig, tmp_path: Path
) -> None:
    """A paused schedule posts nothing more (its run under way aside), a resumed one posts
    again from its next period, a deleted one never again — while a witness schedule of
    the same period goes on posting, which shows that periods did pass."""
    rig.model.default = digest_model()
    env = env_of(rig)
    every = ("--team", "T1", "--every", "1s")
    sid = (await add_schedule(env, tmp_path, *every, "--channel", "C0STEER001", "--prompt", "a"))[
        "id"
    ]
    witness = (
        await add_schedule(env, tmp_path, *every, "--channel", "C0WITNESS1", "--prompt", "b")
    )["id"]
    await rig.slack.wait_until(lambda: len(digests(rig.slack, sid)) >= 1, 30, what="a digest")

    paused = json.loads(await cli(env, tmp_path, "schedules", "pause", sid, "--json"))
    assert paused["state"] == "paused"
    await runs_settled(rig.db, sid)  # the run that was under way, if any, has posted
    before = len(digests(rig.slack, sid))
    await witness_periods(rig, witness, 2)
    assert len(digests(rig.slack, sid)) == before

    resumed = json.loads(await cli(env, tmp_path, "schedules", "resume", sid, "--json"))
    assert resumed["state"] == "active"
    await rig.slack.wait_until(
        lambda: len(digests(rig.slack, sid)) > before, 30, what="a digest after resume"
    )

    await cli(env, tmp_path, "schedules", "delete", sid)
    await runs_settled(rig.db, sid)
    gone = len(digests(rig.slack, sid))
    assert [s.id for s in await list_schedules(rig.db)] == [witness]
    await witness_periods(rig, witness, 2)
    assert len(digests(rig.slack, sid)) == gone


async def witness_periods(rig: Rig, witness: str, n: int) -> None:
    """Wait until the witness schedule has posted for `n` more periods."""
    seen = len(periods(digests(rig.slack, witness)))
    await rig.slack.wait_until(
        lambda: len(periods(digests(rig.slack, witness))) >= seen + n, 30, what="witness periods"
    )


async def metric(rig: Rig, outcome: str) -> float:
    async with rig.http.get(rig.metrics_url) as response:
        text = await response.text()
    line = f'threadgate_schedule_runs_total{{outcome="{outcome}"}} '
    found = [row for row in text.splitlines() if row.startswith(line)]
    return float(found[0].removeprefix(line)) if found else 0.0


async def test_a_run_with_nothing_to_say_posts_nothing(rig: Rig, tmp_path: Path) -> None:
    """A run whose model calls `no_reply` (offered in runs only) ends done without a
    post, `schedules show` says `silent`, and the metric counts it."""
    rig.model.default = digest_model(silent=lambda period: True)
    env = env_of(rig)
    sid = (
        await add_schedule(
            env,
            tmp_path,
            "--team",
            "T1",
            "--channel",
            "C0QUIET001",
            "--every",
            "1s",
            "--prompt",
            "Digest, if anything happened",
        )
    )["id"]
    await rig.model.wait_until(lambda: any(schedule_run(r) for r in rig.model.requests), 30)
    await cli(env, tmp_path, "schedules", "pause", sid)
    await runs_settled(rig.db, sid)
    shown = json.loads(await cli(env, tmp_path, "schedules", "show", sid, "--json"))
    assert shown["last_outcome"] == "silent"
    assert not [p for p in rig.slack.posts if p.channel == "C0QUIET001"]
    assert await metric(rig, "silent") >= 1
    runs = [r for r in rig.model.requests if schedule_run(r)]
    assert all("no_reply" in tool_names(r) for r in runs)


def tool_names(seen: RecordedRequest) -> set[str]:
    return {t["function"]["name"] for t in seen.body.get("tools", [])}


async def test_a_person_creates_lists_and_deletes_their_own_schedule_by_asking(
    rig: Rig, tmp_path: Path
) -> None:
    """ "Every second, say hi" becomes a schedule owned by the person who asked (listed by
    `schedules list --owner`), whose runs post in the channel once they approve it;
    someone else neither sees nor deletes it; its owner deletes it by asking."""
    rig.model.default = digest_model(fallback=asking)
    rig.slack.add_user(DEFAULT_USER, name="asker")
    env = env_of(rig)
    await mention(rig, "every second, say hi")
    await rig.slack.wait_until(lambda: any("waiting for its owner" in t for t in told(rig)), 30)
    [mine] = await list_schedules(rig.db, owner=f"T1:{DEFAULT_USER}")
    assert mine.target == "channel" and mine.channel == DEFAULT_CHANNEL
    await approve(rig, mine.id)
    await rig.slack.wait_until(lambda: len(digests(rig.slack, mine.id)) >= 1, 30)
    assert (await cli(env, tmp_path, "schedules", "list", "--owner", f"T1:{DEFAULT_USER}")).count(
        "every 1s"
    ) == 1
    # One after the other: each mention opens a thread of its own, and two threads are
    # answered in parallel, so the delete's answer could come before the list's.
    await mention(rig, "list mine", user=OTHER)
    await rig.slack.wait_until(lambda: len(told(rig)) >= 2, 30, what="the other's list")
    await mention(rig, f"delete {mine.id}", user=OTHER)
    await rig.slack.wait_until(lambda: len(told(rig)) >= 3, 30, what="the other's delete")
    assert "no schedules" in told(rig)[1]
    assert "has no schedule" in told(rig)[2]
    assert (await get_schedule(rig.db, mine.id)).state == "active"
    await mention(rig, f"delete {mine.id}")
    await rig.slack.wait_until(lambda: len(told(rig)) >= 4, 30, what="the owner's delete")
    assert "Deleted schedule" in told(rig)[3]
    assert await list_schedules(rig.db) == []


OTHER = "U0OTHER0001"


async def approve(rig: Rig, schedule_id: str, *, user: str = DEFAULT_USER) -> None:
    """`user` clicks Approve on the message that asks about the schedule (over HTTP)."""
    value = f"schedule:{schedule_id}"
    await rig.slack.wait_until(lambda: asking_post(rig, value) is not None, 30, what="the ask")
    post = asking_post(rig, value)
    assert post is not None
    payload = rig.slack.click(post.channel, post.ts, APPROVE, user=user)
    status, body = await deliver_interaction(rig.http, rig.events_url, payload, SECRET)
    assert status == 200, body


def asking_post(rig: Rig, value: str) -> Post | None:
    """The message whose Approve button's value is `value`, once posted."""
    return next(
        (
            p
            for p in rig.slack.posts
            for b in p.blocks or []
            if b["type"] == "actions" and any(e.get("value") == value for e in b["elements"])
        ),
        None,
    )


def asking(seen: RecordedRequest) -> Reply:
    """A model that manages schedules when asked, and says what the tool answered."""
    last = seen.body["messages"][-1]
    if last["role"] == "tool":
        return reply_with_tool("final_reply", {"text": f"tool said: {tool_text(last)}"})
    text = last_user_text(seen.body)
    if "every second" in text:
        arguments = {"prompt": "say hi", "every": "1s", "where": "channel"}
        return reply_with_tool("schedule_create", arguments)
    if "list mine" in text:
        return reply_with_tool("schedule_list", {})
    words = text.split("delete ", 1)
    if len(words) == 2:
        return reply_with_tool("schedule_delete", {"id": words[1].split("<")[0].strip()})
    return reply_with_tool("final_reply", {"text": "ok"})


def tool_text(message: dict[str, object]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else json.dumps(content)


def told(rig: Rig) -> list[str]:
    return [p.text for p in rig.slack.posts if p.text.startswith("tool said:")]


async def mention(rig: Rig, words: str, *, user: str = DEFAULT_USER) -> None:
    event = app_mention_event(text=f"<@UBOT> {words}", user=user)
    assert (await rig.send(event_callback(event)))[0] == 200


async def test_a_schedule_whose_channel_is_gone_is_paused_and_the_operators_told(
    rig: Rig, tmp_path: Path
) -> None:
    """Before a run, the channel is checked: archived or not found, the schedule is paused
    with the reason, nothing is posted or asked of the model, the operator channel hears of
    it once, and `paused` is counted."""
    rig.model.default = digest_model()
    env = env_of(rig)
    rig.slack.archived.add("C0ARCHIVED")
    rig.slack.deleted.add("C0DELETED1")
    ids = [
        (
            await add_schedule(
                env,
                tmp_path,
                "--team",
                "T1",
                "--channel",
                channel,
                "--every",
                "1s",
                "--prompt",
                "Digest",
            )
        )["id"]
        for channel in ("C0ARCHIVED", "C0DELETED1")
    ]
    await rig.slack.wait_until(lambda: len(alerts(rig)) >= 2, 30, what="two operator alerts")
    archived, deleted = [await get_schedule(rig.db, sid) for sid in ids]
    assert archived.state == deleted.state == "paused"
    assert archived.paused_reason is not None and "archived" in archived.paused_reason
    assert deleted.paused_reason is not None and "channel_not_found" in deleted.paused_reason
    assert not [r for r in rig.model.requests if schedule_run(r)]
    assert not [p for p in rig.slack.posts if p.channel in ("C0ARCHIVED", "C0DELETED1")]
    assert await metric(rig, "paused") == 2
    shown = await cli(env, tmp_path, "schedules", "show", ids[0])
    assert "paused by threadgate" in shown and "archived" in shown


def alerts(rig: Rig) -> list[str]:
    return [p.text for p in rig.slack.posts if p.channel == "COPS" and "paused" in p.text]


async def test_a_dm_schedule_opens_the_dm_once_and_a_thread_schedule_posts_in_its_thread(
    rig: Rig, tmp_path: Path
) -> None:
    """`--dm U…` posts in the person's DM, found with one conversations.open and kept;
    `--channel C --thread TS` posts in that thread."""
    rig.model.default = digest_model()
    env = env_of(rig)
    dm = (
        await add_schedule(
            env, tmp_path, "--team", "T1", "--dm", "U0PERSON01", "--every", "1s", "--prompt", "dm"
        )
    )["id"]
    thread = (
        await add_schedule(
            env,
            tmp_path,
            "--team",
            "T1",
            "--channel",
            "C0THREAD01",
            "--thread",
            "1700000000.000100",
            "--every",
            "1s",
            "--prompt",
            "thread",
        )
    )["id"]
    await rig.slack.wait_until(
        lambda: len(digests(rig.slack, dm)) >= 2 and len(digests(rig.slack, thread)) >= 2, 30
    )
    assert {(p.channel, p.thread_ts) for p in digests(rig.slack, dm)} == {("D0PERSON01", None)}
    assert {(p.channel, p.thread_ts) for p in digests(rig.slack, thread)} == {
        ("C0THREAD01", "1700000000.000100")
    }
    opened = rig.slack.calls_to("conversations.open")
    assert [c.params.get("users") for c in opened] == ["U0PERSON01"]


@pytest.mark.rig(
    overrides={
        **FAST,
        "THREADGATE_SLACK_TIMEOUT_SECONDS": "3",
        "THREADGATE_SLACK_SETTLE_SECONDS": "0.2",
    }
)
async def test_a_top_level_post_whose_response_was_lost_is_not_posted_twice(
    rig: Rig, tmp_path: Path
) -> None:
    """A run's post lands at the top of the channel but its answer is cut: the retry
    looks for it in the channel's history (there is no thread to read) and finds it."""
    rig.model.default = digest_model()
    rig.slack.drop_after_recording("chat.postMessage")
    env = env_of(rig)
    soon = datetime.now(UTC) + timedelta(seconds=1)
    new = NewSchedule("T1", "channel", "Once", recur_once(soon), "test", channel="C0LOSTPOST")
    sid = (await create_schedule(rig.db, new)).id
    await rig.slack.wait_until(lambda: len(digests(rig.slack, sid)) >= 1, 30, what="the post")
    await runs_settled(rig.db, sid)
    assert (
        json.loads(await cli(env, tmp_path, "schedules", "show", sid, "--json"))["last_outcome"]
        == "posted"
    )
    assert len([p for p in rig.slack.posts if p.channel == "C0LOSTPOST"]) == 1
    assert [c.params.get("channel") for c in rig.slack.calls_to("conversations.history")] == [
        "C0LOSTPOST"
    ]


@pytest.mark.rig(overrides={**FAST, **STREAMING})
async def test_with_streaming_a_channel_run_posts_whole_and_a_thread_run_streams(
    rig: Rig, tmp_path: Path
) -> None:
    """Streams go into threads: a run at the top of a channel is posted whole, one in a
    thread streams there (addressed to the schedule's person), each once."""
    rig.model.default = digest_model()
    env = env_of(rig)
    top = (
        await add_schedule(
            env,
            tmp_path,
            "--team",
            "T1",
            "--channel",
            "C0STREAM01",
            "--every",
            "1s",
            "--prompt",
            "top",
        )
    )["id"]
    root = "1700000000.000200"
    rig.slack.seed_message("C0STREAM02", root, DEFAULT_USER, "a thread")
    new = NewSchedule(
        "T1",
        "thread",
        "in thread",
        recur_every("1s"),
        DEFAULT_USER,
        channel="C0STREAM02",
        thread_ts=root,
        owner=f"T1:{DEFAULT_USER}",
    )
    rig.slack.add_user(DEFAULT_USER, name="owner")  # a person's schedule: its owner is there
    threaded = (await create_schedule(rig.db, new)).id
    await rig.slack.wait_until(
        lambda: (
            len(digests(rig.slack, top)) >= 1
            and any("digest" in s.text for s in rig.slack.streams if s.channel == "C0STREAM02")
        ),
        30,
        what="a posted run and a streamed one",
    )
    assert all(p.thread_ts is None for p in digests(rig.slack, top))
    assert not [s for s in rig.slack.streams if s.channel == "C0STREAM01"]
    streamed = [s for s in rig.slack.streams if s.channel == "C0STREAM02"]
    assert all(s.thread_ts == root for s in streamed)
    assert threaded != top


@pytest.mark.rig(overrides={**FAST, "THREADGATE_CHANNEL_DAILY_TOKENS": "1"})
async def test_a_period_whose_token_budget_is_spent_is_not_run(rig: Rig, tmp_path: Path) -> None:
    """A run is charged to its channel's daily budget like a person's message; once the
    budget is spent, later periods make no task and no post, and are counted `limited`."""
    rig.model.default = digest_model()
    env = env_of(rig)
    sid = (
        await add_schedule(
            env,
            tmp_path,
            "--team",
            "T1",
            "--channel",
            "C0BUDGET01",
            "--every",
            "1s",
            "--prompt",
            "spend",
        )
    )["id"]
    await rig.slack.wait_until(lambda: len(digests(rig.slack, sid)) >= 1, 30, what="a digest")
    await until_metric(rig, "limited", 1)
    await runs_settled(rig.db, sid)
    posted = len(digests(rig.slack, sid))
    tasks = await rig.db.pool.fetchval(
        "SELECT count(*) FROM tasks WHERE schedule_id = $1", int(sid)
    )
    await until_metric(rig, "limited", 3)
    assert len(digests(rig.slack, sid)) == posted
    assert (
        await rig.db.pool.fetchval("SELECT count(*) FROM tasks WHERE schedule_id = $1", int(sid))
        == tasks
    )


async def until_metric(rig: Rig, outcome: str, n: float) -> None:
    """Wait, looking again every moment, until the schedule outcome `outcome` was counted
    `n` times; a deadline turns a hang into a failure."""
    async with asyncio.timeout(30):
        while await metric(rig, outcome) < n:  # noqa: ASYNC110 - a pause between looks
            await asyncio.sleep(0.2)


async def test_a_channel_policy_withholds_the_schedule_tools_like_any_other(
    rig: Rig, tmp_path: Path
) -> None:
    """The schedule tools are ordinary tool names: a channel whose policy does not list
    them is not offered them, and a call to one there makes no schedule; elsewhere they
    are offered."""
    config = tmp_path / "channels.json"
    config.write_text(
        json.dumps(
            {
                "default": {"tools": ["*"]},
                "channels": {"C0NOSCHED1": {"tools": ["current_time", "read_thread"]}},
            }
        )
    )
    await rig.gateway.stop()  # the one gateway is the one with the policy: its workers decide
    gateway = await rig.start_gateway(
        socket_mode=False, overrides={**FAST, "THREADGATE_CHANNEL_CONFIG": str(config)}
    )
    rig.model.default = asking
    url = f"http://127.0.0.1:{gateway.port}/slack/events"
    for channel in ("C0NOSCHED1", DEFAULT_CHANNEL):
        event = app_mention_event(text="<@UBOT> every second, say hi", channel=channel)
        assert (await deliver(rig.http, url, event_callback(event), SECRET))[0] == 200
    await rig.slack.wait_until(lambda: len(told(rig)) >= 2, 30, what="both answers")
    # Each channel's first request is the person's: the schedule made in the default
    # channel runs every second, and its runs (offered no schedule tools) may come next.
    offered: dict[str, set[str]] = {}
    for seen in rig.model.requests:
        if channel := channel_of(seen):
            offered.setdefault(channel, tool_names(seen))
    assert "schedule_create" not in offered["C0NOSCHED1"]
    assert {"schedule_create", "schedule_list", "schedule_delete"} <= offered[DEFAULT_CHANNEL]
    assert [s.channel for s in await list_schedules(rig.db)] == [DEFAULT_CHANNEL]


def channel_of(seen: RecordedRequest) -> str:
    """The channel of the person's turn a request answers ("" for none)."""
    text = last_user_text(seen.body)
    marker = ' channel="'
    return text.split(marker, 1)[1].split('"', 1)[0] if marker in text else ""


@pytest.mark.rig(oauth=True, workspaces={"T2": "C2ALPHA", "T3": "C3BRAVO"}, overrides=FAST)
async def test_an_uninstall_pauses_that_workspaces_schedules(rig: Rig) -> None:
    """app_uninstalled pauses every schedule of the workspace, saying why; another
    workspace's schedules stay active."""
    for team in ("T2", "T3"):
        await rig.install(team)
    made = {
        team: await create_schedule(
            rig.db,
            NewSchedule(team, "channel", "digest", recur_every("1h"), "test", channel=channel),
        )
        for team, channel in (("T2", "C2ALPHA"), ("T3", "C3BRAVO"))
    }
    assert rig.slack.oauth is not None
    rig.slack.oauth.uninstall("T2")
    assert (await rig.send(event_callback({"type": "app_uninstalled"}, team_id="T2")))[0] == 200
    gone, kept = [await get_schedule(rig.db, made[t].id) for t in ("T2", "T3")]
    assert gone.state == "paused" and "uninstalled" in (gone.paused_reason or "")
    assert kept.state == "active"
