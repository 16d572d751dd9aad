"""Pasted credentials through the whole gateway: a message, its file, a back-filled thread,
`read_thread` and an edit carrying each credential shape reach neither Postgres nor the
model verbatim, while ordinary text around them arrives whole; they are counted, and the
reply says once that one was removed."""

from __future__ import annotations

import pytest

from gateway.text.secrets import KINDS, LABELS, ROTATE_NOTE
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

# One of each kind, as people paste them (none of them real), with the secret in it.
_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJVMCIsIm5hbWUiOiJBZGEifQ."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PASTED = {
    "slack_token": "xoxb-2718281828-3141592653-aB3dE5gH7jK9mN1pQ3sT5vW7",
    "slack_app_token": "xapp-1-A0SECRET001-1700000000000-" + "ab12" * 16,
    "slack_webhook": "https://hooks.slack.com/services/T0SECRET1/B0SECRET2/" + "Wh00k" * 5,
    "anthropic_key": "sk-ant-api03-" + "Zq9" * 31 + "AA",
    "openai_key": "sk-proj-" + "Xy7_" * 30,
    "github_token": "ghp_" + "R2d2C3po" * 4 + "BB8x",
    "gitlab_token": "glpat-" + "Gl4b" * 5,
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_key": "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "google_api_key": "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "jwt": _JWT,
    "stripe_key": "sk_live_51" + "StR1pe" * 16,
    "npm_token": "npm_" + "Np9m" * 9,
    "huggingface_token": "hf_" + "HuggingFaceTokenForAda" + "xyzXYZabcABC",
    "sendgrid_key": "SG." + "sEnDgRiD" * 2 + "abcdef." + "Sg7" * 14 + "x",
    "url_password": "postgresql://app:Zq9-s3cr3t-Pa55@db.internal:5432/prod",
    "pypi_token": "pypi-AgEIcHlwaS5vcmc" + "PyP1" * 20,
    "discord_token": "MTA" + "d1sc0rd" * 3 + "x." + "Gq2Xz9." + "D1sc" * 6 + "abc",
    "telegram_token": "123456789:" + "AAHtel3gram" * 3 + "Xy",
    "twilio_key": "SK" + "0123456789abcdef" * 2,
    "mailchimp_key": "0123456789abcdef" * 2 + "-us21",
    "square_secret": "sq0csp-" + "Sq0" * 14 + "x",
    "azure_storage_key": "AccountKey=" + "AzUr3+/" * 12 + "AzUr==",
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\n"
    + "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n" * 3
    + "-----END RSA PRIVATE KEY-----",
}
# What must be gone from each: the secret beside its context, or the whole paste.
SECRETS = PASTED | {
    "aws_secret_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "url_password": "Zq9-s3cr3t-Pa55",
}
# Words the old shapes took for a Slack token or a key.
ORDINARY = "xoxo-hugs-and-kisses from the task-runner-prod team (BEGIN RSA PRIVATE KEY docs)"
# Half of them typed, half in the attached file.
TYPED = KINDS[::2]
IN_FILE = KINDS[1::2]
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
    return "\n".join(f"my {name}: {PASTED[name]}" for name in names)


async def test_no_credential_in_a_message_or_its_file_is_stored_or_sent(rig: Rig) -> None:
    """A DM with half the kinds in its text and half in its text file: the stored turn, the
    outbox and the model request hold only labels, the ordinary words beside them arrive
    whole; the reply ends with the note, once."""
    file = rig.slack.files.add_file("env.txt", f"{pasted(*IN_FILE)}\n{ORDINARY}".encode())
    text = pasted(*TYPED)
    event = file_share_event(text=f"{text}\nand {FINE_GRAINED} — why 401? {ORDINARY}", files=[file])
    await rig.send(event_callback(event))
    (reply,) = await rig.slack.wait_for_posts(1)
    await wait_for_task(rig.db, f"T1:{event['channel']}:{event['ts']}", "done")
    stored, sent = await stored_text(rig), sent_to_model(rig)
    for secret in [*SECRETS.values(), FINE_GRAINED]:
        assert secret not in stored and secret not in sent
    for kind in KINDS:
        assert LABELS[kind] in sent
    assert sent.count(ORDINARY) == 2  # the message's and the file's, untouched
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
