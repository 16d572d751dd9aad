"""Prompt caches kept the way the vendors describe theirs, for the model fakes.

A fake with a cache counts the prompt of each request and answers with the usage the real
API would report: how much of it was read from the cache, and (Anthropic) written to it.
So a benchmark's cached share is what our requests earn, not a number a test scripted.

Tokens are counted as a quarter of the bytes of each part's canonical JSON (keys sorted,
no spaces): about what English text costs, and the same count for the same bytes, which is
all a prefix cache needs. `cache_control` markers are left out of what is counted and
compared (they mark the prompt, they are not part of it), and a message's text counts the
same whether it is sent as a string or as a text block (Anthropic renders both alike).

Anthropic (prompt caching guide): the prompt is tools, then system, then messages; each
block carrying `cache_control` is a breakpoint, the prefix up to it is written to the
cache when it is at least the model's minimum length, and a later request reads the
longest prefix written before that ends at one of its own breakpoints or up to 20 blocks
before one. Usage: `input_tokens` (after the last breakpoint or uncached),
`cache_read_input_tokens`, `cache_creation_input_tokens`.

OpenAI (prompt caching guide): automatic for prompts of 1,024 tokens or more; requests are
routed by `prompt_cache_key` and the prompt's first 256 tokens, and a request reads the
longest prefix it shares with an earlier prompt of its route, in steps of 128 tokens past
the first 1,024. Usage: `prompt_tokens_details.cached_tokens`. Without a key, the
keyless requests that start alike share a route (what spreading them over machines under
load costs a real deployment is not modelled).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

TOKEN_BYTES = 4
ANTHROPIC_LOOKBACK = 20
OPENAI_MINIMUM = 1024
OPENAI_STEP = 128
ROUTE_TOKENS = 256


def canonical(part: Any) -> bytes:
    """A part of a prompt as the caches compare it: sorted JSON, `cache_control` left out."""
    return json.dumps(_unmarked(part), sort_keys=True, separators=(",", ":")).encode()


def count_tokens(part: Any) -> int:
    """What a part of a prompt counts as (a quarter of its canonical bytes, rounded up)."""
    return math.ceil(len(canonical(part)) / TOKEN_BYTES)


def _unmarked(part: Any) -> Any:
    if isinstance(part, dict):
        return {k: _unmarked(v) for k, v in part.items() if k != "cache_control"}
    if isinstance(part, list):
        return [_unmarked(v) for v in part]
    return part


class AnthropicCache:
    """The prefixes Anthropic would have cached, per breakpoint; `minimum` is the model's
    shortest cacheable prefix (1,024 tokens for Sonnet and Opus 4)."""

    def __init__(self, minimum: int = 1024) -> None:
        self.minimum = minimum
        self._written: set[str] = set()

    def usage(self, body: Any) -> dict[str, int]:
        """The usage of a Messages request's prompt, the cache updated by it."""
        blocks = anthropic_blocks(body)
        ends, hashes = _prefixes(canonical(b) for b, _ in blocks)
        total = ends[-1] if ends else 0
        breakpoints = [i for i, (_, marked) in enumerate(blocks) if marked]
        read = self._read(breakpoints, hashes, ends)
        written = 0
        if breakpoints and ends[breakpoints[-1]] >= self.minimum:
            self._written.update(hashes[i] for i in breakpoints if ends[i] >= self.minimum)
            written = ends[breakpoints[-1]] - read
        return {
            "input_tokens": total - read - written,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
        }

    def _read(self, breakpoints: list[int], hashes: list[str], ends: list[int]) -> int:
        """Tokens of the longest prefix written before that a breakpoint reaches."""
        hit = -1
        for point in breakpoints:
            for i in range(point, max(-1, point - ANTHROPIC_LOOKBACK), -1):
                if hashes[i] in self._written:
                    hit = max(hit, i)
                    break
        return ends[hit] if hit >= 0 else 0


def anthropic_blocks(body: Any) -> list[tuple[Any, bool]]:
    """The prompt's blocks in Anthropic's order (tools, system, messages' content), each
    with whether it carries a breakpoint; a message's blocks name its role."""
    blocks: list[tuple[Any, bool]] = []
    for tool in body.get("tools") or []:
        blocks.append((tool, "cache_control" in tool))
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or []:
        blocks.append(({"system": block}, "cache_control" in block))
    for message in body.get("messages") or []:
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in parts or []:
            blocks.append(({"role": message.get("role"), **block}, "cache_control" in block))
    return blocks


def _prefixes(parts: Any) -> tuple[list[int], list[str]]:
    """For each part, the tokens up to and including it and the hash of that prefix."""
    digest = hashlib.sha256()
    ends: list[int] = []
    hashes: list[str] = []
    size = 0
    for part in parts:
        digest.update(part)
        size += len(part)
        ends.append(math.ceil(size / TOKEN_BYTES))
        hashes.append(digest.copy().hexdigest())
    return ends, hashes


class OpenAICache:
    """The prompts OpenAI would have cached, per route (`prompt_cache_key` and the first
    256 tokens)."""

    def __init__(self) -> None:
        self._prompts: dict[tuple[str | None, bytes], list[bytes]] = {}

    def usage(self, body: Any) -> dict[str, Any]:
        """The usage of a Chat Completions request's prompt, the cache updated by it."""
        prompt = canonical(body.get("tools") or []) + canonical(body.get("messages") or [])
        total = math.ceil(len(prompt) / TOKEN_BYTES)
        route = (body.get("prompt_cache_key"), prompt[: ROUTE_TOKENS * TOKEN_BYTES])
        earlier = self._prompts.setdefault(route, [])
        shared = max((_common(prompt, e) for e in earlier), default=0) // TOKEN_BYTES
        earlier.append(prompt)
        cached = 0
        if total >= OPENAI_MINIMUM and shared >= OPENAI_MINIMUM:
            cached = OPENAI_MINIMUM + (shared - OPENAI_MINIMUM) // OPENAI_STEP * OPENAI_STEP
        return {"prompt_tokens": total, "prompt_tokens_details": {"cached_tokens": cached}}


def _common(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of two byte strings."""
    n = min(len(a), len(b))
    low, high = 0, n
    while low < high:  # binary search on prefix equality: prompts run to many kilobytes
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low
