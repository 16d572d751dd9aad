"""Tests of the Slack fakes, driven by the real slack-sdk client and its retry handlers.

Gateway tests trust `FakeSlack` and `slack_events` to behave like Slack; these tests are
where that trust is earned: the real `AsyncWebClient` must be able to talk to the fake, its
retry handlers must see the faults the way they would see Slack's, and the signatures must
verify with slack-sdk's own `SignatureVerifier`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import builtin_async_handlers
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from .slack_api import FakeSlack
from .slack_events import (
    app_mention_event,
    bot_message_event,
    deliver,
    dm_message_event,
    event_callback,
    message_changed_event,
    new_ts,
    sign,
    ts_to_micros,
)

TOKEN = "xoxb-test"
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0A1B2C3D4E"
USER = "U0A1B2C3D4E"
NO_WAIT = FixedValueRetryIntervalCalculator(0)
METADATA = {"event_type": "threadgate_outbox", "event_payload": {"outbox_id": "task:1:reply"}}


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token=TOKEN, bot_user_id="UBOT", team_id="T1") as fake:
        yield fake


def client_for(
    slack: FakeSlack, *handlers: AsyncRetryHandler, token: str = TOKEN
) -> AsyncWebClient:
    return AsyncWebClient(token=token, base_url=slack.url, retry_handlers=list(handlers))


async def test_url_is_a_loopback_base_that_slack_sdk_joins_method_names_onto(
    slack: FakeSlack,
) -> None:
    """The base URL ends in /api/ on 127.0.0.1, and auth.test answers with the bot's identity."""
    assert slack.url.startswith("http://127.0.0.1:") and slack.url.endswith("/api/")
    response = await client_for(slack).auth_test()
    assert response["team_id"] == "T1" and response["user_id"] == "UBOT"
    assert response["bot_id"] and response["url"] and response["team"] and response["user"]
    assert [c.method for c in slack.calls] == ["auth.test"]


async def test_post_into_thread_is_returned_by_replies_with_metadata(slack: FakeSlack) -> None:
    """A threaded chat.postMessage comes back from conversations.replies after its parent,
    carrying its metadata only when include_all_metadata is asked for."""
    parent = new_ts()
    slack.seed_message(CHANNEL, parent, USER, "<@UBOT> hello")
    client = client_for(slack)
    blocks = [{"type": "markdown", "text": "**hi**"}]
    posted = await client.chat_postMessage(
        channel=CHANNEL, thread_ts=parent, text="hi", blocks=blocks, metadata=METADATA
    )
    assert ts_to_micros(posted["ts"]) > ts_to_micros(parent)
    assert posted["message"]["metadata"] == METADATA

    replies = await client.conversations_replies(
        channel=CHANNEL, ts=parent, include_all_metadata=True
    )
    assert [m["ts"] for m in replies["messages"]] == [parent, posted["ts"]]
    assert replies["messages"][0]["reply_count"] == 1
    assert replies["messages"][1]["metadata"] == METADATA
    assert replies["messages"][1]["bot_id"] == slack.bot_id
    plain = await client.conversations_replies(channel=CHANNEL, ts=parent)
    assert "metadata" not in plain["messages"][1]
    assert slack.thread(CHANNEL, parent) == ["hi"]
    assert slack.posts[0].blocks == blocks and slack.posts[0].metadata == METADATA


async def test_form_encoded_post_with_json_string_metadata_is_decoded(slack: FakeSlack) -> None:
    """A form-encoded post whose metadata is a JSON string is stored as an object."""
    form = {"channel": CHANNEL, "text": "hi", "metadata": json.dumps(METADATA)}
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with session.post(f"{slack.url}chat.postMessage", data=form, headers=headers) as r:
            assert r.status == 200 and (await r.json())["ok"] is True
    assert slack.posts[0].metadata == METADATA and slack.posts[0].thread_ts is None


async def test_invalid_message_arguments_answer_slack_error_codes(slack: FakeSlack) -> None:
    """Bad metadata, missing text and oversized markdown get Slack's errors, not a post."""
    client = client_for(slack)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"text": "x", "metadata": {"event_type": "x"}}, "invalid_metadata_format"),
        ({"text": "x", "blocks": [{"type": "markdown", "text": "a" * 12_001}]}, "invalid_blocks"),
    ]
    for arguments, error in cases:
        with pytest.raises(SlackApiError) as caught:
            await client.chat_postMessage(channel=CHANNEL, **arguments)
        assert caught.value.response["error"] == error
    no_text_warning = pytest.warns(UserWarning, match="`text` argument is missing")  # slack-sdk's
    with no_text_warning, pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(channel=CHANNEL)
    assert caught.value.response["error"] == "no_text"
    assert slack.posts == []


async def test_replies_paginate_with_cursor(slack: FakeSlack) -> None:
    """conversations.replies pages through a thread with next_cursor, oldest first."""
    parent = new_ts()
    slack.seed_message(CHANNEL, parent, USER, "start")
    for n in range(4):
        slack.seed_message(CHANNEL, new_ts(), USER, f"reply {n}", thread_ts=parent)
    client = client_for(slack)
    texts: list[str] = []
    async for page in await client.conversations_replies(channel=CHANNEL, ts=parent, limit=2):
        texts += [m["text"] for m in page["messages"]]
    assert texts == ["start", "reply 0", "reply 1", "reply 2", "reply 3"]
    assert len(slack.calls_to("conversations.replies")) == 3


async def test_rate_limited_call_is_retried_after_retry_after(
    slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 429 with Retry-After: 2 is retried by the client's handler after (at least) 2 s,
    and the second attempt posts once."""
    requested: list[float] = []

    async def record_sleep(seconds: float) -> None:
        requested.append(seconds)

    # The handler calls `asyncio.sleep` through its own module global; record, don't wait.
    monkeypatch.setattr(builtin_async_handlers, "asyncio", SimpleNamespace(sleep=record_sleep))
    slack.rate_limit("chat.postMessage", retry_after=2)
    client = client_for(slack, AsyncRateLimitErrorRetryHandler(max_retry_count=1))

    response = await client.chat_postMessage(channel=CHANNEL, text="hi")

    assert response["ok"] is True
    assert [c.fault for c in slack.calls_to("chat.postMessage")] == ["ratelimited", None]
    assert len(requested) == 1 and 2 <= requested[0] < 3
    assert len(slack.posts) == 1


async def test_rate_limit_without_a_retry_handler_surfaces_status_and_header(
    slack: FakeSlack,
) -> None:
    """Without a handler the 429 reaches the caller with status, `ratelimited` and Retry-After."""
    slack.rate_limit("chat.postMessage", retry_after=7)
    with pytest.raises(SlackApiError) as caught:
        await client_for(slack).chat_postMessage(channel=CHANNEL, text="hi")
    response = caught.value.response
    assert response.status_code == 429 and response["error"] == "ratelimited"
    assert response.headers["Retry-After"] == "7"


async def test_server_errors_are_retried_then_exhausted(slack: FakeSlack) -> None:
    """A 500 is retried into success; 503s beyond the handler's budget reach the caller."""
    client = client_for(slack, AsyncServerErrorRetryHandler(1, interval_calculator=NO_WAIT))
    slack.fail("chat.postMessage", status=500)
    assert (await client.chat_postMessage(channel=CHANNEL, text="one"))["ok"] is True

    slack.fail("chat.postMessage", status=503, times=2)
    with pytest.raises(SlackApiError) as caught:
        await client.chat_postMessage(channel=CHANNEL, text="two")
    assert caught.value.response.status_code == 503
    faults = [c.fault for c in slack.calls_to("chat.postMessage")]
    assert faults == ["http_error", None, "http_error", "http_error"]
    assert slack.thread(CHANNEL, None) == ["one"]


async def test_record_then_drop_raises_in_client_but_message_is_in_thread(
    slack: FakeSlack,
) -> None:
    """A dropped response is a connection error for the client although the post landed."""
    parent = new_ts()
    slack.seed_message(CHANNEL, parent, USER, "<@UBOT> hi")
    slack.drop_after_recording("chat.postMessage")
    client = client_for(slack)

    with pytest.raises(aiohttp.ClientConnectionError):
        await client.chat_postMessage(
            channel=CHANNEL, thread_ts=parent, text="answer", metadata=METADATA
        )

    assert slack.thread(CHANNEL, parent) == ["answer"]
    replies = await client.conversations_replies(
        channel=CHANNEL, ts=parent, include_all_metadata=True
    )
    assert replies["messages"][-1]["metadata"] == METADATA


async def test_connection_retry_handler_duplicates_a_dropped_post(slack: FakeSlack) -> None:
    """slack-sdk's connection-error handler re-sends a post whose response was lost, so the
    thread gets it twice: the reason posts must be reconciled, not blindly retried."""
    slack.drop_after_recording("chat.postMessage")
    client = client_for(slack, AsyncConnectionErrorRetryHandler(1, interval_calculator=NO_WAIT))

    assert (await client.chat_postMessage(channel=CHANNEL, text="once?"))["ok"] is True

    assert slack.thread(CHANNEL, None) == ["once?", "once?"]


async def test_wrong_token_and_revoked_token_are_refused(slack: FakeSlack) -> None:
    """A wrong token answers invalid_auth; after revoke_token every call answers token_revoked."""
    with pytest.raises(SlackApiError) as caught:
        await client_for(slack, token="xoxb-wrong").auth_test()
    assert caught.value.response["error"] == "invalid_auth"
    slack.revoke_token()
    with pytest.raises(SlackApiError) as caught:
        await client_for(slack).chat_postMessage(channel=CHANNEL, text="hi")
    assert caught.value.response["error"] == "token_revoked"
    assert caught.value.response.status_code == 200
    assert slack.posts == []


async def test_users_info_knows_added_users_only(slack: FakeSlack) -> None:
    """users.info returns names for added users and user_not_found otherwise."""
    slack.add_user(USER, name="alice", real_name="Alice Liddell", display_name="alice")
    client = client_for(slack)
    user = (await client.users_info(user=USER))["user"]
    assert (user["name"], user["real_name"]) == ("alice", "Alice Liddell")
    assert user["profile"]["display_name"] == "alice"
    assert user["profile"]["real_name"] == "Alice Liddell"
    with pytest.raises(SlackApiError) as caught:
        await client.users_info(user="U0NOBODY00")
    assert caught.value.response["error"] == "user_not_found"


async def test_set_status_is_recorded(slack: FakeSlack) -> None:
    """assistant.threads.setStatus is recorded, including the empty status that clears it."""
    client = client_for(slack)
    await client.assistant_threads_setStatus(
        channel_id=CHANNEL, thread_ts="1700000000.000100", status="is thinking…"
    )
    await client.assistant_threads_setStatus(
        channel_id=CHANNEL, thread_ts="1700000000.000100", status=""
    )
    assert [s.status for s in slack.statuses] == ["is thinking…", ""]


async def test_update_and_history_see_the_stored_message(slack: FakeSlack) -> None:
    """chat.update edits a posted message; conversations.history lists top-level ones."""
    client = client_for(slack)
    posted = await client.chat_postMessage(channel=CHANNEL, text="draft")
    await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="final")
    history = await client.conversations_history(channel=CHANNEL)
    assert [m["text"] for m in history["messages"]] == ["final"]


async def test_hold_keeps_a_request_waiting_until_released(slack: FakeSlack) -> None:
    """A held method is recorded on arrival and answers only once the test sets the event."""
    gate = slack.hold("chat.postMessage")
    post = asyncio.create_task(client_for(slack).chat_postMessage(channel=CHANNEL, text="hi"))
    await slack.wait_until(lambda: bool(slack.calls_to("chat.postMessage")), timeout=5)
    assert slack.posts == [] and not post.done()
    gate.set()
    assert (await post)["ok"] is True
    assert (await slack.wait_for_posts(1, timeout=5))[0].text == "hi"


async def test_wait_for_posts_times_out_with_what_was_posted(slack: FakeSlack) -> None:
    """wait_for_posts fails with an AssertionError listing the posts seen so far."""
    await client_for(slack).chat_postMessage(channel=CHANNEL, text="only one")
    with pytest.raises(AssertionError) as caught:
        await slack.wait_for_posts(2, timeout=0.05)
    message = str(caught.value)
    assert "2 post(s)" in message and "'only one'" in message and "chat.postMessage" in message


def test_signature_verifies_with_slack_sdk_verifier() -> None:
    """sign() produces headers slack-sdk's SignatureVerifier accepts, and only for that body."""
    body = json.dumps(event_callback(app_mention_event(text="<@UBOT> hi"))).encode()
    now = int(time.time())
    headers = sign(body, SECRET, now)
    verifier = SignatureVerifier(SECRET)
    assert verifier.is_valid_request(body, headers)
    assert not verifier.is_valid_request(body + b" ", headers)
    assert not SignatureVerifier("other-secret").is_valid_request(body, headers)
    stale = sign(body, SECRET, now - 301)
    assert not verifier.is_valid_request(body, stale)


async def test_deliver_sends_signed_envelope_with_retry_headers() -> None:
    """deliver() POSTs the JSON envelope signed for the receiver, with Slack's retry headers."""
    seen: list[tuple[bool, dict[str, str], dict[str, object]]] = []
    verifier = SignatureVerifier(SECRET)

    async def events(request: web.Request) -> web.Response:
        body = await request.read()
        valid = verifier.is_valid_request(body, dict(request.headers))
        seen.append((valid, dict(request.headers), json.loads(body)))
        return web.Response(status=200 if valid else 401)

    app = web.Application()
    app.router.add_post("/slack/events", events)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        url = f"http://{host}:{port}/slack/events"
        envelope = event_callback(dm_message_event(text="hello"))
        async with aiohttp.ClientSession() as session:
            assert (await deliver(session, url, envelope, SECRET))[0] == 200
            assert (await deliver(session, url, envelope, SECRET, retry_num=1))[0] == 200
            assert (await deliver(session, url, envelope, SECRET, bad_signature=True))[0] == 401
            stale = int(time.time()) - 600
            assert (await deliver(session, url, envelope, SECRET, timestamp=stale))[0] == 401
    finally:
        await runner.cleanup()
    first, retry = seen[0][1], seen[1][1]
    assert "X-Slack-Retry-Num" not in first
    assert (retry["X-Slack-Retry-Num"], retry["X-Slack-Retry-Reason"]) == ("1", "http_timeout")
    assert seen[0][2] == seen[1][2] == envelope


def test_event_builders_have_slack_shapes() -> None:
    """Builders produce Slack's event shapes with unique, increasing ts and event ids."""
    mention = app_mention_event(text="<@UBOT> what &amp; why", channel=CHANNEL)
    section = mention["blocks"][0]["elements"][0]["elements"]
    assert section == [{"type": "user", "user_id": "UBOT"}, {"type": "text", "text": " what & why"}]
    dm = dm_message_event(text="hi")
    assert dm["channel_type"] == "im" and dm["channel"].startswith("D")
    assert ts_to_micros(dm["ts"]) > ts_to_micros(mention["ts"])
    assert bot_message_event(text="beep")["subtype"] == "bot_message"
    own = bot_message_event(text="mine", user="UBOT", bot_id="B0BOT00001")
    assert "subtype" not in own and own["user"] == "UBOT"
    edit = message_changed_event(ts=mention["ts"], new_text="new", old_text="old")
    assert edit["subtype"] == "message_changed" and edit["message"]["ts"] == mention["ts"]
    first, second = event_callback(mention), event_callback(dm)
    assert first["type"] == "event_callback" and first["event_id"].startswith("Ev")
    assert first["event_id"] != second["event_id"]
    assert first["authorizations"][0]["user_id"] == "UBOT"


async def test_posts_record_the_parse_and_link_names_flags(slack: FakeSlack) -> None:
    """chat.postMessage's `parse` and `link_names` are recorded as sent (JSON or form), and
    a post that sets neither counts as one whose names Slack may link."""
    client = client_for(slack)
    await client.chat_postMessage(channel=CHANNEL, text="a", parse="none", link_names=False)
    await client.api_call(
        "chat.postMessage", data={"channel": CHANNEL, "text": "b", "link_names": "1"}
    )
    await client.chat_postMessage(channel=CHANNEL, text="c")
    flags = [(p.parse, p.link_names, p.may_link_names) for p in slack.posts]
    assert flags == [("none", False, False), (None, True, True), (None, None, True)]


BUTTONS = {
    "type": "actions",
    "elements": [
        {
            "type": "button",
            "action_id": "yes",
            "text": {"type": "plain_text", "text": "Approve"},
            "style": "primary",
            "value": "request-1",
        }
    ],
}
FEEDBACK = {
    "type": "context_actions",
    "elements": [
        {
            "type": "feedback_buttons",
            "action_id": "rate",
            "positive_button": {"text": {"type": "plain_text", "text": "👍"}, "value": "up"},
            "negative_button": {"text": {"type": "plain_text", "text": "👎"}, "value": "down"},
        }
    ],
}


@pytest.mark.parametrize(
    "block",
    [
        {**BUTTONS, "elements": [{**BUTTONS["elements"][0], "style": "green"}]},  # type: ignore[dict-item]
        {**BUTTONS, "elements": [{**BUTTONS["elements"][0], "value": "x" * 2001}]},  # type: ignore[dict-item]
        {**BUTTONS, "elements": []},
        {**FEEDBACK, "elements": [{"type": "feedback_buttons", "action_id": "rate"}]},
        {**FEEDBACK, "elements": [{"type": "button"}]},
        {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}},
    ],
    ids=["bad-style", "long-value", "no-elements", "no-buttons", "not-feedback", "long-section"],
)
async def test_blocks_slack_would_refuse_are_invalid_blocks(
    slack: FakeSlack, block: dict[str, Any]
) -> None:
    """A button or feedback block against the Block Kit reference answers invalid_blocks."""
    with pytest.raises(SlackApiError) as refused:
        await client_for(slack).chat_postMessage(channel=CHANNEL, text="t", blocks=[block])
    assert refused.value.response["error"] == "invalid_blocks"


async def test_a_click_is_the_payload_of_the_button_that_was_posted(slack: FakeSlack) -> None:
    """`click` finds the posted element: a button's value and style, a feedback button's
    value for the vote; an element the message does not have cannot be clicked."""
    posted = await client_for(slack).chat_postMessage(
        channel=CHANNEL, text="t", blocks=[BUTTONS, FEEDBACK]
    )
    button = slack.click(CHANNEL, posted["ts"], "yes", user=USER)
    assert button["type"] == "block_actions" and button["user"]["id"] == USER
    assert button["container"] == {
        "type": "message",
        "message_ts": posted["ts"],
        "channel_id": CHANNEL,
        "is_ephemeral": False,
    }
    [action] = button["actions"]
    assert (action["type"], action["value"], action["style"]) == ("button", "request-1", "primary")
    [vote] = slack.click(CHANNEL, posted["ts"], "rate", user=USER, vote="negative")["actions"]
    assert (vote["type"], vote["value"]) == ("feedback_buttons", "down")
    with pytest.raises(AssertionError):
        slack.click(CHANNEL, posted["ts"], "no-such-action", user=USER)


async def test_an_ephemeral_message_is_recorded_for_its_one_reader(slack: FakeSlack) -> None:
    """chat.postEphemeral needs a user; what it posts is seen by them only (not a post)."""
    client = client_for(slack)
    answer = await client.chat_postEphemeral(channel=CHANNEL, user=USER, text="only you")
    assert answer["message_ts"]
    assert [(e.user, e.text) for e in slack.ephemerals] == [(USER, "only you")]
    assert slack.posts == []
    with pytest.raises(SlackApiError):
        await client.chat_postEphemeral(channel=CHANNEL, user="", text="nobody")
