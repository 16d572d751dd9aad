"""OpenAI-compatible Chat Completions as a `Model`.

Works with OpenAI and everything that speaks its wire format (vLLM, Ollama, OpenRouter,
a LiteLLM proxy, AI gateways): `POST {base_url}/chat/completions`, where `base_url`
includes the version path, e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`.
"""

from __future__ import annotations

from typing import Any

from agent.models.capabilities import Capabilities
from agent.models.contract import ModelRequest, ModelResponse
from agent.models.providers.http_model import HTTPModel
from agent.models.providers.openai_wire import ChunkReader, build_body, parse_completion
from agent.models.providers.provider import OpenAIProvider
from agent.models.routes import NO_SAMPLING, Sampling

__all__ = ["OpenAIModel", "OpenAIProvider"]


class OpenAIModel(HTTPModel):
    """One model behind an OpenAI-compatible endpoint."""

    path = "/chat/completions"

    def __init__(
        self,
        model: str,
        *,
        provider: OpenAIProvider,
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
        return parse_completion(raw, self.model)

    def reader(self) -> ChunkReader:
        return ChunkReader(self.model)
