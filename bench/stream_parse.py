"""Benchmark: how fast a long streamed answer is parsed.

Two measurements of the same 2,000-chunk OpenAI stream (one token per chunk):

- end to end: a loopback server streams the chunks, one TCP write each, and the real
  `OpenAIModel` folds them into a response. The figure that matters is the ratio to a
  100 tokens/s model: parsing must stay far ahead of generation (target: at least 20x).
- parse only: the same chunks replayed from memory through an `httpx.Response` (no socket,
  no server, so far less noise), framed into events and fed to the OpenAI chunk reader, once
  by our own decoder (`agent.models.providers.sse`) and once by `httpx-sse`, in alternating
  rounds of one run. Their ratio is the comparison that decides which decoder we keep; a
  ratio measured within one run does not depend on how busy the machine happens to be.

    .venv/bin/python -m bench.stream_parse
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
from httpx_sse import EventSource
from pydantic import SecretStr

from agent.models.contract import ModelRequest, UserMessage
from agent.models.providers.openai import OpenAIModel, OpenAIProvider
from agent.models.providers.openai_wire import ChunkReader
from agent.models.providers.sse import aiter_sse
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


def _ours(response: httpx.Response) -> AsyncIterator[Any]:
    return aiter_sse(response.aiter_bytes())


def _library(response: httpx.Response) -> AsyncIterator[Any]:
    return EventSource(response).aiter_sse()


Framing = Callable[[httpx.Response], AsyncIterator[Any]]
DECODERS: dict[str, Framing] = {"ours": _ours, "httpx-sse": _library}


async def _parse(framing: Framing, chunks: Sequence[bytes], *, read: bool) -> float:
    """Seconds to frame the whole stream and, with `read`, feed each event to the reader."""
    reader = ChunkReader("bench")
    events = 0
    started = time.perf_counter()
    async for event in framing(_response(chunks)):
        events += 1
        if read:
            # httpx-sse's event is another class with the same fields; the reader reads `data`.
            for _ in reader.feed(event):
                pass
    elapsed = time.perf_counter() - started
    assert events == CHUNKS + 1 and (not read or reader.done)  # + the [DONE] event
    return elapsed


async def _parse_times(chunks: Sequence[bytes], *, read: bool) -> dict[str, list[float]]:
    """Seconds per whole stream, per decoder; the decoders alternate within each round."""
    times: dict[str, list[float]] = {name: [] for name in DECODERS}
    for _ in range(PARSE_ROUNDS):
        for name, framing in DECODERS.items():
            times[name].append(await _parse(framing, chunks, read=read))
    return times


def _report_parse(what: str, times: dict[str, list[float]]) -> None:
    for name, seconds in times.items():
        print(
            f"stream_parse: {what}, {name}: {CHUNKS / min(seconds):,.0f} chunks/s "
            f"(best of {PARSE_ROUNDS}; median {CHUNKS / statistics.median(seconds):,.0f})"
        )
    # Paired per round, so a slow moment of the machine slows both sides of a ratio alike.
    pairs = zip(times["ours"], times["httpx-sse"], strict=True)
    speed = statistics.median(ours / library for ours, library in pairs)
    print(f"stream_parse: {what}, httpx-sse runs at {speed:.2f}x the speed of ours")


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
    chunks = _stream()
    _report_parse("framing only", asyncio.run(_parse_times(chunks, read=False)))
    _report_parse("framing + OpenAI reader", asyncio.run(_parse_times(chunks, read=True)))


if __name__ == "__main__":
    main()
