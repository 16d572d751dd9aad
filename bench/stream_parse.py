"""Benchmark: how fast the OpenAI provider parses a long streamed answer.

A loopback server streams 2,000 chunks (one token each, one TCP write each) and the real
`OpenAIModel` folds them into a response. The figure that matters is the ratio to a
100 tokens/s model: parsing must stay far ahead of generation (target: at least 20x).

    .venv/bin/python -m bench.stream_parse
"""

from __future__ import annotations

import asyncio
import time

from pydantic import SecretStr

from agent.models.contract import ModelRequest, UserMessage
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from tests.fakes.openai_api import OpenAIServer, StreamReply, sse

CHUNKS = 2_000
MODEL_TOKENS_PER_SECOND = 100
TARGET_RATIO = 20


def _stream() -> list[bytes]:
    def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-b",
            "object": "chat.completion.chunk",
            "model": "bench",
            "choices": [choice],
        }

    tokens = [chunk({"content": f" tok{i}"}) for i in range(CHUNKS - 1)]
    return sse(*tokens, chunk({"content": " end"}, "stop"))


async def _measure() -> float:
    async with OpenAIServer() as server:
        server.script(StreamReply(_stream()))
        provider = OpenAIProvider(base_url=server.url, api_key=SecretStr("bench"))
        model = OpenAIModel("bench", provider=provider, stream=True)
        started = time.perf_counter()
        response = await model.request(ModelRequest((UserMessage("go"),)))
        elapsed = time.perf_counter() - started
        await model.aclose()
    assert response.text.endswith(" end") and response.finish_reason == "stop"
    return elapsed


def main() -> None:
    elapsed = min(asyncio.run(_measure()) for _ in range(3))
    rate = CHUNKS / elapsed
    ratio = rate / MODEL_TOKENS_PER_SECOND
    verdict = "ok" if ratio >= TARGET_RATIO else "BELOW TARGET"
    print(
        f"stream_parse: {CHUNKS} chunks in {elapsed * 1000:.0f} ms = {rate:,.0f} chunks/s, "
        f"{ratio:,.0f}x real time of a {MODEL_TOKENS_PER_SECOND} tokens/s model "
        f"(target >= {TARGET_RATIO}x: {verdict})"
    )


if __name__ == "__main__":
    main()
