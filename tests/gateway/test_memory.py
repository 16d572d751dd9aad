"""What the bot remembers, through the whole gateway: pinned messages stay in view with
their turns (and a pin past the cap is told), a thread keeps the system prompt it started
with across a deploy that changes only the words, begins a recorded epoch when the offer
changes, and `tasks show` says which epoch and route wrote each answer."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.operator.task_commands import render_detail
from storage import inspect_task
from tests.fakes.openai_api import Completion, RecordedRequest, Reply, reply_with_tool
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    app_mention_event,
    event_callback,
    message_event,
    new_ts,
)
from tests.fakes.slack_pins import file_pin_event, pin_event, pinned_message
from tests.gateway.process import run_cli_output
from tests.gateway.rig import Rig, echo, last_user_text
from tests.pg import wait_for_task, wait_for_value

# Each turn is long enough that the window (1,000 characters) holds only the newest one.
PAD = "filler " * 50
SMALL_WINDOW = {"THREADGATE_HISTORY_CHARS": "1000"}
pytestmark = pytest.mark.rig(overrides=SMALL_WINDOW, users={DEFAULT_USER: "Ada"})


def user_texts(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "user"]


def system_text(body: dict[str, Any]) -> str:
    return str(next(m["content"] for m in body["messages"] if m["role"] == "system"))


async def say(rig: Rig, root: str, text: str) -> None:
    """A reply in the thread (the bot takes part in it), answered before this returns."""
    posted = len(rig.slack.posts)
    await rig.send(event_callback(message_event(text=text, thread_ts=root)))
    await rig.slack.wait_for_posts(posted + 1)


async def test_a_pinned_message_stays_in_view_after_it_would_have_aged_out(rig: Rig) -> None:
    """A pin over HTTP keeps the old message in every later model request, marked pinned,
    while an unpinned message of the same age has dropped out of the window."""
    root = new_ts()
    await rig.send(event_callback(app_mention_event(text=f"<@UBOT> code PELICAN {PAD}", ts=root)))
    await rig.slack.wait_for_posts(1)
    await say(rig, root, f"colour MAUVE {PAD}")
    pin = pin_event(pinned_message(text=f"<@UBOT> code PELICAN {PAD}", ts=root))
    assert (await rig.send(event_callback(pin)))[0] == 200
    for n in range(3):
        await say(rig, root, f"later {n} {PAD}")
    last = user_texts(rig.model.requests[-1].body)
    pinned = [t for t in last if "PELICAN" in t]
    assert len(pinned) == 1 and pinned[0].startswith("[pinned] ")
    assert not any("MAUVE" in t for t in last)
    assert "later 2" in last[-1]


async def test_our_own_reply_can_be_pinned_and_unpinned(rig: Rig) -> None:
    """A pin of the bot's reply (found through the ts its post got) flags the stored reply;
    the unpin clears it; a file pin changes nothing."""
    root = new_ts()
    await rig.send(event_callback(app_mention_event(text="<@UBOT> plan?", ts=root)))
    (post,) = await rig.slack.wait_for_posts(1)
    await wait_for_task(rig.db, f"T1:{DEFAULT_CHANNEL}:{root}", "done")  # its ts is recorded
    ours = pinned_message(text=post.text, ts=post.ts, user="UBOT", thread_ts=root, bot_id="B1")
    reply_id = f"task:T1:{DEFAULT_CHANNEL}:{root}:reply"
    query = "SELECT pinned FROM messages WHERE id = $1"
    assert (await rig.send(event_callback(pin_event(ours))))[0] == 200
    assert await rig.db.pool.fetchval(query, reply_id) is True
    assert (await rig.send(event_callback(file_pin_event())))[0] == 200
    assert (await rig.send(event_callback(pin_event(ours, added=False))))[0] == 200
    assert await rig.db.pool.fetchval(query, reply_id) is False


@pytest.mark.rig(
    overrides=SMALL_WINDOW | {"THREADGATE_PINNED_MAX": "1"}, users={"U0PINNER001": "Cy"}
)
async def test_a_pinned_answer_keeps_its_question_and_a_pin_past_the_room_is_listed_and_told(
    rig: Rig,
) -> None:
    """Pinning the bot's answer keeps the question it answered in later requests; with room
    for one pin, the next pin moves it to the list: the model still reads that it is
    pinned, and how it starts, and the person who pinned is told privately, in the thread,
    which message is now only listed (escaped: it cannot ping). Before, it was unpinned."""
    root = new_ts()
    rig.model.default = lambda seen: reply_with_tool(
        "final_reply", {"text": "The code is PELICAN <!channel> @here."}
    )
    await rig.send(event_callback(app_mention_event(text=f"<@UBOT> the code? {PAD}", ts=root)))
    (answer,) = await rig.slack.wait_for_posts(1)
    rig.model.default = echo
    await wait_for_task(rig.db, f"T1:{DEFAULT_CHANNEL}:{root}", "done")  # its ts is recorded
    ours = pinned_message(text=answer.text, ts=answer.ts, user="UBOT", thread_ts=root, bot_id="B1")
    assert (await rig.send(event_callback(pin_event(ours, pinned_by="U0PINNER001"))))[0] == 200
    for n in range(2):
        await say(rig, root, f"later {n} {PAD}")
    shown = [m["content"] for m in rig.model.requests[-1].body["messages"][1:3]]
    assert shown[0].startswith("[pinned] ") and "the code?" in shown[0]  # the question
    assert shown[1].startswith("[pinned] ") and "PELICAN" in shown[1]  # the answer pinned
    assert rig.slack.ephemerals == []
    later = rig.slack.posts[-1]
    newer = pinned_message(text=later.text, ts=later.ts, user="UBOT", thread_ts=root, bot_id="B1")
    await wait_for_value(rig.db, "SELECT count(*) FROM tasks WHERE state <> 'done'", 0)
    assert (await rig.send(event_callback(pin_event(newer, pinned_by="U0PINNER001"))))[0] == 200
    (note,) = rig.slack.ephemerals
    assert (note.user, note.channel, note.thread_ts) == ("U0PINNER001", DEFAULT_CHANNEL, root)
    assert "I read the newest pin of a conversation whole, in about 1,000 characters" in note.text
    assert "my answer “The code is PELICAN &lt;" in note.text
    assert "<" not in note.text and "@here" not in note.text
    await say(rig, root, "and the code?")
    [listing] = [t for t in user_texts(rig.model.requests[-1].body) if "pins_listed" in t]
    assert listing.startswith('<runtime source="pins_listed">Also pinned in this conversation')
    assert '[pinned] <runtime source="pins_listed">Your answer, starting: The code is PELICAN' in (
        listing
    )
    pinned = "SELECT count(*) FROM messages WHERE pinned AND session_id = $1"
    assert await rig.db.pool.fetchval(pinned, f"T1:{DEFAULT_CHANNEL}:{root}") == 2


@pytest.mark.rig(
    overrides=SMALL_WINDOW | {"THREADGATE_CONTINUE_THREADS": "false"},
    modes=("socket",),
    users={"U0OTHER0001": "Bo"},
)
async def test_a_pin_of_a_message_we_never_stored_is_retained(rig: Rig) -> None:
    """Over Socket Mode: someone's thread reply the bot never received (threads are not
    continued: the app is not subscribed to channel messages) is stored when pinned,
    rendered in its turn tag with its author, and shown to the model; an unpin forgets it."""
    root, aside = new_ts(), new_ts()
    await rig.sockets.deliver(event_callback(app_mention_event(text="<@UBOT> hi", ts=root)))
    await rig.slack.wait_for_posts(1)
    message = pinned_message(text="budget is 42k", user="U0OTHER0001", ts=aside, thread_ts=root)
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(event_callback(pin_event(message))))
    retained = await rig.db.pool.fetchrow(
        "SELECT text, provenance, pinned FROM messages WHERE id = $1",
        f"slack:T1:{DEFAULT_CHANNEL}:{aside}",
    )
    assert retained is not None and retained["pinned"] and retained["provenance"] == "pin"
    assert 'from="Bo" id="U0OTHER0001"' in retained["text"]
    await rig.sockets.deliver(
        event_callback(app_mention_event(text=f"<@UBOT> and the budget? {PAD}", thread_ts=root))
    )
    await rig.slack.wait_for_posts(2)
    assert any("[pinned] " in t and "42k" in t for t in user_texts(rig.model.requests[-1].body))
    unpin = event_callback(pin_event(message, added=False))
    await rig.sockets.wait_for_ack(await rig.sockets.deliver(unpin))
    query = "SELECT count(*) FROM messages WHERE provenance = 'pin'"
    assert await rig.db.pool.fetchval(query) == 0


async def test_a_thread_keeps_its_prompt_across_a_deploy_until_reset(
    rig: Rig, tmp_path: Path
) -> None:
    """A new prompt (THREADGATE_INSTRUCTIONS) after a restart: the old thread is still asked
    under the old prompt, a new thread under the new one; `tasks show` prints each answer's
    epoch and route; `threadgate sessions reset` moves the old thread to the new prompt."""
    old_root = new_ts()
    await rig.send(event_callback(app_mention_event(text="<@UBOT> hello", ts=old_root)))
    await rig.slack.wait_for_posts(1)
    old_prompt = system_text(rig.model.requests[-1].body)
    assert "pirate" not in old_prompt
    await wait_for_task(rig.db, f"T1:{DEFAULT_CHANNEL}:{old_root}", "done")  # then the deploy
    await rig.gateway.stop()
    rig.gateway = await rig.start_gateway(
        socket_mode=False, overrides={"THREADGATE_INSTRUCTIONS": "Answer like a pirate."}
    )
    await say(rig, old_root, "again")
    assert system_text(rig.model.requests[-1].body) == old_prompt
    new_root = new_ts()
    await rig.send(event_callback(app_mention_event(text="<@UBOT> ahoy", ts=new_root)))
    await rig.slack.wait_for_posts(3)
    new_prompt = system_text(rig.model.requests[-1].body)
    assert new_prompt.endswith("Answer like a pirate.\n")

    new_task = f"T1:{DEFAULT_CHANNEL}:{new_root}"
    await wait_for_task(rig.db, new_task, "done")
    texts = "SELECT text FROM prompt_epochs WHERE hash = $1"
    detail = await inspect_task(rig.db, new_task)
    (epoch,) = detail.epochs
    assert await rig.db.pool.fetchval(texts, epoch.hash) == new_prompt
    page = render_detail(detail)
    assert f"prompt epoch #1 {epoch.hash[:12]}, route openai:gpt-test (primary)" in page
    old_task = f"T1:{DEFAULT_CHANNEL}:{old_root}"
    old_detail = await inspect_task(rig.db, old_task)
    (old_epoch,) = old_detail.epochs  # new words alone begin no epoch
    assert old_epoch.reason == "start"
    assert await rig.db.pool.fetchval(texts, old_epoch.hash) == old_prompt
    assert f"prompt epoch #1 {old_epoch.hash[:12]}, route openai" in render_detail(old_detail)

    session = f"T1:{DEFAULT_CHANNEL}:{old_root}"
    status, out, err = await run_cli_output(
        ["sessions", "reset", session, "--reason", "new house rules"],
        {"DATABASE_URL": rig.database_url},
        tmp_path,
    )
    assert status == 0 and f"Session {session} was on prompt epoch" in out, err
    await say(rig, old_root, "and now?")
    assert system_text(rig.model.requests[-1].body) == new_prompt
    assert "operators of this workspace" not in old_prompt
    epochs = (await inspect_task(rig.db, old_task)).epochs
    assert [(e.number, e.reason) for e in epochs] == [(1, "start"), (2, "reset")]


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body["tools"]]


async def test_a_deploy_that_changes_the_offer_begins_a_recorded_epoch(
    rig: Rig, tmp_path: Path
) -> None:
    """After a restart that withholds read_thread (and rewords the prompt), the old
    thread's next request is a new epoch — the new words with the new offer, never the old
    words beside it — offering exactly the tools `tasks show` lists for that epoch, which
    it shows as #2, offer_changed, after #1 start."""
    root = new_ts()
    await rig.send(event_callback(app_mention_event(text="<@UBOT> hello", ts=root)))
    await rig.slack.wait_for_posts(1)
    before = rig.model.requests[-1].body
    assert "read_thread" in tool_names(before)
    await wait_for_task(rig.db, f"T1:{DEFAULT_CHANNEL}:{root}", "done")  # then the deploy
    config = tmp_path / "channels.json"
    config.write_text(
        json.dumps({"default": {"tools": ["current_time"], "instructions": "Be a pirate."}})
    )
    await rig.gateway.stop()
    rig.gateway = await rig.start_gateway(
        socket_mode=False, overrides={"THREADGATE_CHANNEL_CONFIG": str(config)}
    )
    await say(rig, root, "again")
    after = rig.model.requests[-1].body
    assert tool_names(after) == ["final_reply", "delegate", "current_time"]
    assert system_text(after).endswith("Be a pirate.\n") and system_text(before) != system_text(
        after
    )

    await wait_for_value(rig.db, "SELECT count(*) FROM tasks WHERE state <> 'done'", 0)
    again = await rig.db.pool.fetchval(
        "SELECT id FROM tasks WHERE session_id = $1 ORDER BY seq DESC LIMIT 1",
        f"T1:{DEFAULT_CHANNEL}:{root}",
    )
    page = render_detail(await inspect_task(rig.db, again))
    lines = page.split("Prompt epochs of the session\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split(" at ")[0].strip() for line in lines] == ["#1 start", "#2 offer_changed"]
    assert lines[1].endswith(f"offers {', '.join(tool_names(after))}")
    assert lines[0].endswith(f"offers {', '.join(tool_names(before))}")
    assert ", prompt epoch #2 " in page


async def long_thread(rig: Rig, replies: list[str]) -> None:
    """A thread opened with a long mention (code PELICAN), then these replies, each answered."""
    root = new_ts()
    await rig.send(event_callback(app_mention_event(text=f"<@UBOT> code PELICAN {PAD}", ts=root)))
    await rig.slack.wait_for_posts(1)
    for text in replies:
        await say(rig, root, text)


def summarizing(seen: RecordedRequest) -> Reply:
    """The echo model, which also summarizes: a summary request gets the codes it read."""
    if system_text(seen.body).startswith("You keep the memory of a long conversation"):
        read = " ".join(sorted(set(re.findall(r"code [A-Z]{4,}", last_user_text(seen.body)))))
        return Completion(text=f"Earlier: {read or 'nothing'}.")
    return echo(seen)


async def test_a_long_thread_is_summarized_instead_of_dropped(rig: Rig) -> None:
    """Once the first turns no longer fit, the next request starts with a summary of them
    (framed as data), written by the model through the ladder and counted; the request
    stays as small as the window, however long the thread grows."""
    rig.model.default = summarizing
    await long_thread(rig, [f"code {'ABCDEFGH'[n] * 4} {PAD}" for n in range(6)])
    rounds = [r for r in rig.model.requests if not system_text(r.body).startswith("You keep")]
    summaries = [r for r in rig.model.requests if system_text(r.body).startswith("You keep")]
    assert summaries, "the thread was never compacted"
    first = user_texts(summaries[0].body)[0]
    assert first.startswith('<tool_output source="earlier conversation"') and "PELICAN" in first
    last = user_texts(rounds[-1].body)
    assert "summary of the earlier conversation" in last[0] and "PELICAN" in last[0]
    assert "code FFFF" in last[-1]
    stored = await rig.db.pool.fetch("SELECT covers_from_seq, covers_to_seq FROM summaries")
    assert stored and all(s["covers_from_seq"] <= s["covers_to_seq"] for s in stored)
    sizes = [len(json.dumps(r.body)) for r in rounds[2:]]
    assert max(sizes) < 2 * min(sizes)  # flat: the window's size, not the thread's
    page = await (await rig.http.get(rig.metrics_url)).text()
    assert 'threadgate_compactions_total{outcome="summarized"}' in page


async def test_a_summary_that_fails_drops_the_old_turns_as_before(rig: Rig) -> None:
    """A summarizer that only ever errs: every message is still answered, without a summary,
    and the failures are counted."""

    def no_summaries(seen: RecordedRequest) -> Reply:
        if system_text(seen.body).startswith("You keep the memory of a long conversation"):
            return Completion(text="")  # no usable text: a failed attempt on every slot
        return echo(seen)

    rig.model.default = no_summaries
    await long_thread(rig, [f"more {n} {PAD}" for n in range(3)])
    assert len(rig.slack.posts) == 4
    assert await rig.count("summaries") == 0
    page = await (await rig.http.get(rig.metrics_url)).text()
    assert 'threadgate_compactions_total{outcome="failed"} ' in page
    assert 'threadgate_compactions_total{outcome="failed"} 0.0' not in page


async def test_a_thread_compacted_twice_under_one_prompt_keeps_one_epoch(rig: Rig) -> None:
    """Before: each compaction numbered a new epoch, so `tasks show` listed "#2 compaction",
    "#3 compaction" though the prompt never changed. Now a compaction under the prompt the
    session is pinned to restates that epoch: `tasks show` of a thread summarized twice
    lists one epoch, #1 start, and every answer is stamped with it."""
    rig.model.default = summarizing
    await long_thread(rig, [f"code {'ABCDEFGH'[n] * 4} {PAD}" for n in range(6)])
    summaries = "SELECT count(*) FROM summaries"
    assert await rig.db.pool.fetchval(summaries) >= 2, "the thread was not compacted twice"
    await wait_for_value(rig.db, "SELECT count(*) FROM tasks WHERE state <> 'done'", 0)
    last = await rig.db.pool.fetchval("SELECT id FROM tasks ORDER BY seq DESC LIMIT 1")
    detail = await inspect_task(rig.db, last)
    assert [(e.number, e.reason) for e in detail.epochs] == [(1, "start")]
    page = render_detail(detail)
    lines = page.split("Prompt epochs of the session\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split(" at ")[0].strip() for line in lines] == ["#1 start"]
    stamped = "SELECT DISTINCT prompt_epoch FROM messages WHERE role = 'assistant'"
    assert [r[0] for r in await rig.db.pool.fetch(stamped)] == [detail.epochs[0].hash]
