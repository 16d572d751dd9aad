"""The fakes' prompt caches keep the vendors' rules (tests/fakes/prompt_cache.py)."""

from __future__ import annotations

from typing import Any

from tests.fakes.prompt_cache import AnthropicCache, OpenAICache, count_tokens

MARK = {"type": "ephemeral"}
LONG = "word " * 2000  # about 2,500 tokens


def anthropic_body(*turns: str, mark_system: bool = True) -> dict[str, Any]:
    system: Any = [
        {"type": "text", "text": LONG, **({"cache_control": MARK} if mark_system else {})}
    ]
    messages = [{"role": "user", "content": t} for t in turns]
    last = messages[-1]
    last["content"] = [{"type": "text", "text": last["content"], "cache_control": MARK}]
    return {"system": system, "messages": messages}


def test_anthropic_writes_at_its_breakpoints_and_reads_what_was_written() -> None:
    """The first request writes its prefix; the next reads it and writes what it added."""
    cache = AnthropicCache()
    first = cache.usage(anthropic_body("one"))
    second = cache.usage(anthropic_body("one", "two"))
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 2000
    assert second["cache_read_input_tokens"] == (
        first["cache_creation_input_tokens"] + first["input_tokens"]
    )
    assert second["input_tokens"] == 0 and second["cache_creation_input_tokens"] > 0


def test_anthropic_caches_nothing_without_breakpoints_or_below_the_minimum() -> None:
    cache = AnthropicCache()
    plain = {"system": LONG, "messages": [{"role": "user", "content": "hi"}]}
    assert cache.usage(plain)["cache_creation_input_tokens"] == 0
    short = {"system": [{"type": "text", "text": "brief", "cache_control": MARK}], "messages": []}
    assert cache.usage(short)["cache_creation_input_tokens"] == 0
    assert cache.usage(short)["cache_read_input_tokens"] == 0


def test_anthropic_a_changed_prefix_is_not_read() -> None:
    cache = AnthropicCache()
    cache.usage(anthropic_body("one"))
    other = anthropic_body("one")
    other["system"][0]["text"] = LONG + "changed"
    assert cache.usage(other)["cache_read_input_tokens"] == 0


def openai_body(*turns: str, key: str | None = "k") -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": "system", "content": LONG}]}
    body["messages"] += [{"role": "user", "content": t} for t in turns]
    return body | ({"prompt_cache_key": key} if key else {})


def test_openai_reads_a_shared_prefix_in_steps_of_128_past_1024() -> None:
    cache = OpenAICache()
    first = cache.usage(openai_body("one"))
    second = cache.usage(openai_body("one", "two"))
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert cached >= 1024 and (cached - 1024) % 128 == 0
    assert cached <= second["prompt_tokens"] and cached > first["prompt_tokens"] - 128


def test_openai_routes_by_key_and_caches_nothing_short() -> None:
    cache = OpenAICache()
    cache.usage(openai_body("one", key="a"))
    assert cache.usage(openai_body("one", key="b"))["prompt_tokens_details"]["cached_tokens"] == 0
    short = {"messages": [{"role": "user", "content": "hi"}]}
    cache.usage(short)
    assert cache.usage(short)["prompt_tokens_details"]["cached_tokens"] == 0


def test_markers_are_not_counted() -> None:
    assert count_tokens({"text": "x" * 40, "cache_control": MARK}) == count_tokens(
        {"text": "x" * 40}
    )
