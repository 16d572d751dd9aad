"""A refusal in an AI gateway's shape (a LiteLLM proxy's, Cloudflare AI Gateway's) blames
the gateway token only when one was sent: a LiteLLM proxy checks the very key sent as the
provider's, so without a gateway token of ours the honest answer is `unknown` (issue 37,
item 8)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from agent.core.errors import CredentialRejected, Route
from agent.models.contract import ModelRequest, UserMessage
from agent.models.providers.classify import classify_status
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from tests.agent.test_classify import ANTHROPIC, CLOUDFLARE, LITELLM, OPENAI
from tests.fakes.openai_api import JSONReply, OpenAIServer

ROUTE = Route("openai", "gpt-test", 0)
# LiteLLM's ProxyException bodies for a refused key (litellm/proxy/auth): `auth_error`.
LITELLM_REFUSALS = [
    LITELLM,
    {
        "error": {
            "message": "Authentication Error, Invalid proxy server token passed. Received "
            "API Key = sk-...abcd, Key Hash (Token) =c8c2. Unable to find token in cache or "
            "`LiteLLM_VerificationTokenTable`",
            "type": "auth_error",
            "param": "None",
            "code": "401",
        }
    },
    {
        "error": {
            "message": "Authentication Error, No api key passed in.",
            "type": "auth_error",
            "param": "None",
            "code": "401",
        }
    },
    {
        "error": {
            "message": "Authentication Error - Expired Key. Key Expiry time 2024-01-01",
            "type": "auth_error",
            "param": "None",
            "code": "400",
        }
    },
]


def refused(status: int, body: object, *, gateway_token: bool) -> CredentialRejected:
    error = classify_status(
        status, {}, json.dumps(body).encode(), route=ROUTE, gateway_token=gateway_token
    )
    assert isinstance(error, CredentialRejected)
    return error


@pytest.mark.parametrize("body", [*LITELLM_REFUSALS, CLOUDFLARE])
@pytest.mark.parametrize("status", [401, 403])
def test_a_gateways_refusal_is_the_gateways_only_with_its_token(status: int, body: object) -> None:
    """With a gateway token sent: `gateway`. Without: `unknown`, and the message names
    both secrets to check rather than a gateway token nobody configured."""
    assert refused(status, body, gateway_token=True).source == "gateway"
    without = refused(status, body, gateway_token=False)
    assert without.source == "unknown"
    assert "OPENAI_API_KEY" in str(without) and "was refused by the gateway" not in str(without)


@given(st.sampled_from([OPENAI, ANTHROPIC]), st.sampled_from([401, 403]), st.booleans())
def test_a_providers_refusal_is_the_providers_either_way(
    body: object, status: int, gateway_token: bool
) -> None:
    """A vendor's own error shape says `provider`, whether a gateway token was sent or not."""
    assert refused(status, body, gateway_token=gateway_token).source == "provider"


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("gateway_token", "source"), [(None, "unknown"), ("gw-test", "gateway")])
async def test_over_http_the_source_follows_the_token_the_request_carried(
    gateway_token: str | None, source: str, stream: bool
) -> None:
    """A LiteLLM proxy's 401 through the real client, streamed or not: `unknown` when the
    provider sends no gateway token, `gateway` when it does."""
    async with OpenAIServer() as server:
        server.default = lambda seen: JSONReply(LITELLM, status=401)
        provider = OpenAIProvider(
            base_url=server.url,
            api_key=SecretStr("sk-virtual-key"),
            gateway_header="x-litellm-api-key",
            gateway_token=SecretStr(gateway_token) if gateway_token else None,
        )
        model = OpenAIModel("gpt-test", provider=provider, stream=stream)
        try:
            with pytest.raises(CredentialRejected) as caught:
                await model.request(ModelRequest((UserMessage("hi"),)))
        finally:
            await model.aclose()
        sent = server.requests[0].headers.get("x-litellm-api-key")
    assert caught.value.source == source and sent == gateway_token
