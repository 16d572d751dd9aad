"""Clicks arriving at the gateway: form-encoded interaction payloads are signed and checked
like events (a bad one is a 4xx, never a 500, and stores nothing); what a request shows of
the model's arguments cannot ping; a feedback button's value reads back as written."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent import ApprovalDecision, ApprovalRequest
from gateway.delivery.approval import decided_message, request_message
from gateway.slack.interactive import FEEDBACK, feedback_buttons, vote_of
from tests.fakes.slack_events import DEFAULT_CHANNEL, block_actions, deliver_interaction, sign
from tests.gateway.rig import BOTH, SECRET, Rig

_MENTION = re.compile(r"<[!@#]")


@given(st.text(min_size=1, max_size=300), st.sampled_from(["positive", "negative"]))
def test_a_feedback_value_names_its_vote_and_reply(reply_id: str, vote: str) -> None:
    """What the buttons carry reads back as the vote and the reply, whatever the id."""
    [element] = feedback_buttons(reply_id)["elements"]
    value = element[f"{vote}_button"]["value"]
    assert vote_of(value) == (vote, reply_id)


@given(st.text(max_size=200))
def test_a_value_that_names_no_vote_is_none(value: str) -> None:
    """Anything else (a crafted value) names no vote, or names one of the two."""
    read = vote_of(value)
    assert read is None or read[0] in ("positive", "negative")


@given(st.text(max_size=500), st.text(max_size=40))
def test_a_request_cannot_ping_whatever_the_model_wrote(arguments: str, tool: str) -> None:
    """The model's arguments (and a tool name) never form a mention in the request or its
    decided form; only the asker and the decider are mentioned, by us."""
    request = ApprovalRequest("task:x:approval:0:0", "c1", tool, arguments)
    for message in (
        request_message(request, "UASKER"),
        decided_message(request, ApprovalDecision("approved", "UDECIDER")),
    ):
        markdown = message.blocks[0]["text"]
        assert not _MENTION.search(markdown)
        ours = [b["text"]["text"] for b in message.blocks if b["type"] == "section"]
        assert all(_MENTION.findall(text) in ([], ["<@"]) for text in ours)
    assert not _MENTION.search(request_message(request, "UASKER").text)


def click_payload() -> dict[str, object]:
    message = {
        "ts": "1700000000.000100",
        "blocks": [feedback_buttons("task:T1:C1:1.0:reply")],
    }
    return block_actions(message, channel=DEFAULT_CHANNEL, action_id=FEEDBACK, vote="positive")


async def post_form(rig: Rig, body: bytes) -> tuple[int, str]:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    headers |= sign(body, SECRET, int(time.time()))
    async with rig.http.post(rig.events_url, data=body, headers=headers) as response:
        return response.status, await response.text()


@pytest.mark.rig()
@pytest.mark.parametrize(
    "body",
    [
        b"nothing=here",
        b"payload=not-json",
        urlencode({"payload": "[1, 2]"}).encode(),
        urlencode({"payload": json.dumps({"type": "block_actions", "actions": []})}).encode(),
        urlencode({"payload": "{}", "payload ": "{}"}).encode() + b"&payload=%7B%7D",
    ],
    ids=["no-payload", "not-json", "not-an-object", "no-user", "two-payloads"],
)
async def test_a_malformed_interaction_is_refused_with_400(rig: Rig, body: bytes) -> None:
    """A form body that is not one `block_actions` payload we can read is a 400."""
    status, text = await post_form(rig, body)
    assert status == 400, text


@pytest.mark.rig()
async def test_an_unsigned_click_is_refused_and_stores_nothing(rig: Rig) -> None:
    """A click signed with the wrong secret is a 401: no vote is stored."""
    payload = click_payload()
    status, _ = await deliver_interaction(
        rig.http, rig.events_url, payload, SECRET, bad_signature=True
    )
    assert status == 401
    assert await rig.count("reply_feedback") == 0


@pytest.mark.rig(modes=BOTH)
async def test_a_click_on_no_reply_of_ours_is_acked_and_stores_nothing(rig: Rig) -> None:
    """A well-formed click that names no stored reply is acked (nothing to redeliver) and
    changes nothing."""
    payload = click_payload()
    if rig.socket_mode:
        await rig.sockets.wait_for_ack(await rig.sockets.deliver_interactive(payload))
    else:
        status, body = await deliver_interaction(rig.http, rig.events_url, payload, SECRET)
        assert status == 200, body
    assert await rig.count("reply_feedback") == 0
