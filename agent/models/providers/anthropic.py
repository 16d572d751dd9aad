"""The Anthropic Messages API as a `Model`.

Base URL convention (the Anthropic SDK's): `ANTHROPIC_BASE_URL` is the origin *without*
the version, default `https://api.anthropic.com`, and we `POST {base_url}/v1/messages`.
Behind Cloudflare AI Gateway that is `https://gateway.ai.cloudflare.com/v1/ACCOUNT/GATEWAY/anthropic`.
"""

from __future__ import annotations

from typing import Any

from agent.models.capabilities import Capabilities
from agent.models.contract import ModelRequest, ModelResponse
from agent.models.providers.anthropic_wire import EventReader, build_body, parse_message
from agent.models.providers.http_model import HTTPModel
from agent.models.providers.provider import AnthropicProvider
from agent.models.routes import NO_SAMPLING, Sampling

__all__ = ["AnthropicModel", "AnthropicProvider"]


class AnthropicModel(HTTPModel):
    """One Claude model behind the Messages API."""

    path = "/v1/messages"

    def __init__(
        self,
        model: str,
        *,
        provider: AnthropicProvider,
        slot: int = 0,
        stream: bool = False,
        capabilities: Capabilities | None = None,
        sampling: Sampling = NO_SAMPLING,
        credential: str = "",
    ) -> None:
        super().__init__(
            model,
            provider=provider,
            slot=slot,
            stream=stream,
            capabilities=capabilities,
            sampling=sampling,
            credential=credential,
        )

    def build_body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        return build_body(request, self.model, stream=stream)

    def parse(self, raw: bytes) -> ModelResponse:
        return parse_message(raw, self.model)

    def reader(self) -> EventReader:
        return EventReader(self.model)
