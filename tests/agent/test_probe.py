"""probe_model: one tiny call, latency or the classified failure in one line."""

from __future__ import annotations

from pydantic import SecretStr

from agent.core.errors import CredentialRejected, TransientModelError
from agent.models.contract import ModelRequest, ModelResponse
from agent.models.function_model import FunctionModel, text_response
from agent.models.probe import probe_model
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from tests.fakes.openai_api import JSONReply, OpenAIServer


async def test_latency_is_measured_with_the_injected_clock() -> None:
    """A successful probe reports the elapsed clock time in milliseconds."""
    ticks = iter([1.0, 1.25])
    model = FunctionModel(lambda request: text_response("ok"))
    result = await probe_model(model, clock=lambda: next(ticks))
    assert result.ok and result.latency_ms == 250.0
    assert str(result) == "function:test: ok in 250 ms"
    assert model.requests[0].max_output_tokens == 16


async def test_failure_is_one_classified_line() -> None:
    """A failing model gives its message on one line (no class name) and the error itself,
    no latency."""
    error = TransientModelError("HTTP 503\nfrom upstream")

    def fail(request: ModelRequest) -> ModelResponse:
        raise error

    result = await probe_model(FunctionModel(fail))
    assert not result.ok and result.latency_ms is None
    assert result.detail == "HTTP 503 from upstream" and result.error is error


async def test_gateway_refusal_over_http_names_the_gateway_token() -> None:
    """A gateway refusal seen by the probe tells the operator which secret to check."""
    refusal = {
        "success": False,
        "result": [],
        "messages": [],
        "error": [{"code": 2009, "message": "Unauthorized"}],
    }
    async with OpenAIServer() as server:
        server.script(JSONReply(refusal, status=401))
        provider = OpenAIProvider(base_url=server.url, api_key=SecretStr("sk-test"))
        model = OpenAIModel("gpt-test", provider=provider)
        result = await probe_model(model)
        await model.aclose()
    assert isinstance(result.error, CredentialRejected)
    assert "THREADGATE_GATEWAY_TOKEN" in result.detail
    assert "\n" not in str(result)
