"""A LiteLLM proxy in front of the model refuses the key: the operator's alert blames the
gateway token only when the gateway sends one (THREADGATE_GATEWAY_TOKEN); otherwise it
says the response does not tell who refused, and names both secrets (issue 37, item 8)."""

from __future__ import annotations

import pytest

from tests.agent.test_classify import LITELLM
from tests.fakes.openai_api import JSONReply
from tests.fakes.slack_events import app_mention_event, event_callback
from tests.gateway.rig import Rig


async def operator_alert(rig: Rig) -> str:
    rig.model.default = lambda seen: JSONReply(LITELLM, status=401)
    await rig.send(event_callback(app_mention_event(text="<@UBOT> hello")))
    await rig.slack.wait_until(
        lambda: any(p.channel == "COPS" for p in rig.slack.posts), what="the alert"
    )
    [alert] = [p for p in rig.slack.posts if p.channel == "COPS"]
    return alert.text


async def test_without_a_gateway_token_the_refusal_is_not_the_gateway_tokens(rig: Rig) -> None:
    """No THREADGATE_GATEWAY_TOKEN: the alert says nobody can tell who refused and names
    OPENAI_API_KEY (the key the proxy checked) — not a gateway token nobody set."""
    text = await operator_alert(rig)
    assert "did not say who refused it" in text and "OPENAI_API_KEY" in text
    assert "refused our gateway token" not in text


@pytest.mark.rig(
    overrides={
        "THREADGATE_GATEWAY_TOKEN": "sk-litellm-virtual-key",
        "THREADGATE_GATEWAY_HEADER": "x-litellm-api-key",
    }
)
async def test_with_a_gateway_token_the_refusal_is_the_gateway_tokens(rig: Rig) -> None:
    """THREADGATE_GATEWAY_TOKEN sent in its header: the alert names that token, never its
    value."""
    text = await operator_alert(rig)
    assert "The AI gateway refused our gateway token" in text
    assert "Check THREADGATE_GATEWAY_TOKEN" in text
    assert "sk-litellm-virtual-key" not in text
    assert rig.model.requests[0].headers.get("x-litellm-api-key") == "sk-litellm-virtual-key"
