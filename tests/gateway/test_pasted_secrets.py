"""Pasted credentials through the whole gateway: a message, its file, a back-filled thread,
`read_thread` and an edit carrying each credential shape reach neither Postgres nor the
model verbatim; they are counted, and the reply says once that one was removed."""

from __future__ import annotations

import pytest

from gateway.text.secrets import KINDS, ROTATE_NOTE
from tests.fakes.openai_api import reply_with_tool
from tests.fakes.slack_events import (
    DEFAULT_CHANNEL,
    DEFAULT_USER,
    app_mention_event,
    event_callback,
    file_share_event,
    message_changed_event,
    new_ts,
)
from tests.gateway.rig import STREAMING, Rig, echo
from tests.pg import wait_for_task

pytestmark = pytest.mark.rig(users={DEFAULT_USER: "Ada"})

# One of each shape, as people paste them (none of them real).
SECRETS = {
    "slack_token": "xoxb-2718281828-3141592653-aB3dE5gH7jK9mN1pQ3sT5vW7",
    "slack_app_token": "xapp-1-A0SECRET001-1700000000000-" + "ab12" * 16,
    "anthropic_key": "sk-ant-api03-" + "Zq9" * 31 + "AA",
    "openai_key": "sk-proj-" + "Xy7_" * 30,
    "github_token": "ghp_" + "R2d2C3po" * 4 + "BB8x",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\n"
    + "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n" * 3
    + "-----END RSA PRIVATE KEY-----",
}
FINE_GRAINED = "github_pat_11ABCDEFG0123456789abc_" + "x9" * 29


async def stored_text(rig: Rig) -> str:
    """Every row of every table of the gateway's schema, as text."""
    tables = await rig.db.pool.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
    )
    dumps = [
        await rig.db.pool.fetchval(
            f"SELECT coalesce(string_agg(t::text, E'\\n'), '') FROM \"{r['table_name']}\" t"
        )
        for r in tables
    ]
    return "\n".join(dumps)


def sent_to_model(rig: Rig) -> str:
    return "\n".join(r.raw.decode() for r in rig.model.requests)


async def metrics(rig: Rig) -> str:
    async with rig.http.get(rig.metrics_url) as response:
        return await response.text()


def pasted(*names: str) -> str:
    return "\n".join(f"my {name}: {SECRETS[name]}" for name in names)


async def test_no_credential_in_a_message_or_its_file_is_stored_or_sent(rig: Rig) -> None:
    """A DM with four shapes in its text and three in its text file: the stored turn, the
    outbox and the model request hold only labels; the reply ends with the note, once."""
    file = rig.slack.files.add_file(
        "env.txt", pasted("aws_access_key", "private_key", "anthropic_key").encode()
    )
    text = pasted("slack_token", "slack_app_token", "openai_key", "github_token")
    event = file_share_event(text=f"{text}\nand {FINE_GRAINED} — why 401?", files=[file])
    await rig.send(event_callback(event))
    (reply,) = await rig.slack.wait_for_posts(1)
    await wait_for_task(rig.db, f"T1:{event['channel']}:{event['ts']}", "done")
    stored, sent = await stored_text(rig), sent_to_model(rig)
    for secret in [*SECRETS.values(), FINE_GRAINED]:
        assert secret not in stored and secret not in sent
    assert "[redacted Slack token]" in sent and "[redacted private key]" in sent
    assert reply.text.count(ROTATE_NOTE) == 1 and reply.text.endswith(ROTATE_NOTE)
    counted = await metrics(rig)
    for kind in KINDS:
        expected = 2.0 if kind == "github_token" else 1.0
        assert f'threadgate_secrets_redacted_total{{kind="{kind}"}} {expected}' in counted


async def test_back_filled_messages_thread_reads_and_edits_are_redacted_too(rig: Rig) -> None:
    """A thread whose earlier message pasted a key: the back-fill and read_thread show a
    label; an edit that pastes a token is stored with a label. Only the reply to the
    message whose thread had one carries the note."""
    root, earlier = new_ts(), new_ts()
    rig.slack.seed_message(DEFAULT_CHANNEL, root, DEFAULT_USER, "deploy is failing")
    rig.slack.seed_message(
        DEFAULT_CHANNEL, earlier, "U0OTHER0001", pasted("openai_key"), thread_ts=root
    )
    rig.model.script(reply_with_tool("read_thread", {"limit": 10}, call_id="read"), echo)
    mention = app_mention_event(text="<@UBOT> what is wrong?", thread_ts=root)
    await rig.send(event_callback(mention))
    (reply,) = await rig.slack.wait_for_posts(1)
    assert reply.text.count(ROTATE_NOTE) == 1
    read = [m for m in rig.model.requests[1].body["messages"] if m["role"] == "tool"][-1]
    assert "[redacted OpenAI key]" in read["content"]
    edit = message_changed_event(
        ts=mention["ts"],
        new_text=f"<@UBOT> what is wrong with {SECRETS['slack_token']}?",
        old_text=mention["text"],
        thread_ts=root,
    )
    assert (await rig.send(event_callback(edit)))[0] == 200
    later = app_mention_event(text="<@UBOT> thanks", thread_ts=root)
    await rig.send(event_callback(later))
    posts = await rig.slack.wait_for_posts(2)
    assert ROTATE_NOTE not in posts[1].text  # its own turn had none
    stored, sent = await stored_text(rig), sent_to_model(rig)
    assert "what is wrong with [redacted Slack token]?" in sent
    for secret in (SECRETS["openai_key"], SECRETS["slack_token"]):
        assert secret not in stored and secret not in sent


@pytest.mark.rig(overrides=STREAMING)
async def test_a_streamed_reply_ends_with_the_note_once(rig: Rig) -> None:
    """With streaming on, the reply shown as it was written is completed with the note."""
    await rig.send(event_callback(app_mention_event(text=f"<@UBOT> {pasted('github_token')}")))
    [done] = await rig.slack.wait_for_streams(1, stopped=True)
    assert done.text.count(ROTATE_NOTE) == 1 and done.text.endswith(ROTATE_NOTE)
    assert rig.slack.posts == []
