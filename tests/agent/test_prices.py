"""The price table: what an answer costs, and THREADGATE_PRICES's entries."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.models.prices import DEFAULT_PRICE_TABLE, Price, PriceTable, parse_prices

SONNET = Price(Decimal(3), Decimal(15), Decimal("0.3"), Decimal("3.75"))


def test_an_answer_costs_its_uncached_cached_written_and_output_tokens() -> None:
    """1M prompt tokens of which 600k read and 100k written, 10k output."""
    cost = SONNET.cost(1_000_000, 10_000, cached_tokens=600_000, written=100_000)
    assert cost == Decimal("0.9") + Decimal("0.18") + Decimal("0.375") + Decimal("0.15")


def test_cache_prices_default_to_the_input_price() -> None:
    plain = Price(Decimal(2), Decimal(8))
    assert plain.cost(1_000_000, 0, cached_tokens=500_000) == Decimal(2)


def test_a_dated_model_has_its_undated_price_and_an_unknown_one_none() -> None:
    """Snapshots are priced as their model; anything else unknown is None, never zero."""
    table = DEFAULT_PRICE_TABLE
    assert table.price("anthropic:claude-sonnet-4-5-20250929") == table.price(
        "anthropic:claude-sonnet-4-5"
    )
    assert table.price("openai:gpt-4.1-mini-2025-04-14") == table.price("openai:gpt-4.1-mini")
    assert table.price("openai:gpt-4.1-mini") != table.price("openai:gpt-4.1")
    assert table.cost("openai:llama-3-70b", 100, 10) is None
    assert table.price("openai:o3-mini") is None  # a prefix is not a price


def test_entries_add_to_and_replace_the_built_in_ones() -> None:
    entries = parse_prices(
        '{"openai:local": {"input": 0, "output": 0}, "openai:gpt-4.1": {"input": 1, "output": 4}}'
    )
    table = DEFAULT_PRICE_TABLE.with_entries(entries)
    assert table.cost("openai:local", 1000, 1000) == 0
    assert table.cost("openai:gpt-4.1", 1_000_000, 0) == 1
    assert DEFAULT_PRICE_TABLE.cost("openai:gpt-4.1", 1_000_000, 0) == 2


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[1]", "JSON object"),
        ("{", "not JSON"),
        ('{"gpt": {"input": 1, "output": 1}}', "provider:model"),
        ('{"openai:x": {"input": 1}}', "input and output"),
        ('{"openai:x": {"input": -1, "output": 1}}', "number of USD"),
        ('{"openai:x": {"input": "a", "output": 1}}', "number of USD"),
        ('{"openai:x": {"input": true, "output": 1}}', "number of USD"),
        ('{"openai:x": {"input": 1, "output": 1, "cachd": 1}}', "cachd"),
    ],
)
def test_a_malformed_entry_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_prices(text)


JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=12,
)


@given(st.one_of(JSON.map(json.dumps), st.text()))
def test_any_text_is_prices_or_a_value_error(text: str) -> None:
    """Whatever an operator puts there parses into prices or raises ValueError, and
    every price it gives is a finite, non-negative amount."""
    try:
        entries = parse_prices(text)
    except ValueError:
        return
    for price in entries.values():
        assert price.input >= 0 and price.output >= 0 and price.input.is_finite()
    PriceTable(entries)
