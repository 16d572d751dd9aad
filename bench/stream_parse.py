"""Benchmark: how fast a long streamed answer is parsed.

Two measurements of the same 2,000-chunk OpenAI stream (one token per chunk):

- end to end: a loopback server streams the chunks, one TCP write each, and the real
  `OpenAIModel` folds them into a response. The figure that matters is the ratio to a
  100 tokens/s model: parsing must stay far ahead of generation (target: at least 20x).
- parse only: the same chunks replayed from memory through an `httpx.Response` (no socket,
  no server, so far less noise), in alternating rounds of one run: httpx alone (the bytes
  drained, nothing parsed: the baseline), httpx-sse's framing, and the real `read_stream`
  with the OpenAI chunk reader. Each is given as a ratio to the baseline of its own round,
  which does not depend on how busy the machine happens to be.

httpx-sse replaced a decoder of our own; the version of this file that compared the two in
one run is in its history (`git log -- bench/stream_parse.py`).

    .venv/bin/python -m bench.stream_parse
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import httpx
from httpx_sse import EventSource
from pydantic import SecretStr

from agent.core.errors import Route
from agent.models.contract import ModelRequest, UserMessage
from agent.models.providers.http_model import read_stream
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from agent.models.providers.openai_wire import ChunkReader
from tests.fakes.openai_api import OpenAIServer, StreamReply, sse

CHUNKS = 2_000
MODEL_TOKENS_PER_SECOND = 100
TARGET_RATIO = 20
PARSE_ROUNDS = 20


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


class _Replay(httpx.AsyncByteStream):
    """Recorded chunks, handed to httpx one read at a time as a socket would."""

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def _response(chunks: Sequence[bytes]) -> httpx.Response:
    headers = {"content-type": "text/event-stream"}
    return httpx.Response(200, headers=headers, stream=_Replay(chunks))


async def _drain(response: httpx.Response) -> int:
    """Chunks: what httpx alone costs, the baseline."""
    return len([chunk async for chunk in response.aiter_bytes()])


async def _frame(response: httpx.Response) -> int:
    """SSE events, framed by httpx-sse."""
    return len([event async for event in EventSource(response).aiter_sse()])


async def _read(response: httpx.Response) -> int:
    """`StreamEvent`s: what the model reads, through the production code."""
    reader, route = ChunkReader("bench"), Route("openai", "bench", 0)
    return len([event async for event in read_stream(reader, response, route)])


BASELINE = "httpx alone"
STAGES: dict[str, Callable[[httpx.Response], Awaitable[int]]] = {
    BASELINE: _drain,
    "httpx-sse framing": _frame,
    "read_stream + OpenAI reader": _read,
}


async def _parse_times(chunks: Sequence[bytes]) -> dict[str, list[float]]:
    """Seconds per whole stream, per stage; the stages alternate within each round."""
    times: dict[str, list[float]] = {name: [] for name in STAGES}
    for _ in range(PARSE_ROUNDS):
        for name, stage in STAGES.items():
            started = time.perf_counter()
            count = await stage(_response(chunks))
            times[name].append(time.perf_counter() - started)
            assert count > CHUNKS, (name, count)  # every chunk, and [DONE] or the finish
    return times


def _report_parse(times: dict[str, list[float]]) -> None:
    for name, seconds in times.items():
        # Paired per round, so a slow moment of the machine slows both sides of a ratio alike.
        pairs = zip(seconds, times[BASELINE], strict=True)
        ratio = statistics.median(stage / alone for stage, alone in pairs)
        relative = "the baseline" if name == BASELINE else f"{ratio:.1f}x the time of httpx alone"
        print(
            f"stream_parse: parse only, {name}: {CHUNKS / min(seconds):,.0f} chunks/s "
            f"(best of {PARSE_ROUNDS}; median {CHUNKS / statistics.median(seconds):,.0f}), "
            f"{relative}"
        )


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
    _report_parse(asyncio.run(_parse_times(_stream())))


if __name__ == "__main__":
    main()
