"""What model tokens cost: a price table per provider and model, and one answer's cost.

A price is USD per million tokens: `input` (the prompt, uncached), `cached_input` (read
from the provider's prompt cache), `cache_write` (written to it: Anthropic charges 1.25×
the input price for its five-minute cache; OpenAI writes for free and does not report
them) and `output` (reasoning tokens included, as the providers count them). `Usage`
reports the whole prompt as `input_tokens`, the cached and written parts included, so an
answer costs: uncached × input + cached × cached_input + written × cache_write + output ×
output.

`DEFAULT_PRICES` holds the vendors' list prices for their common models (the standard
tier: no batch or priority discounts). `THREADGATE_PRICES` adds entries or replaces them.
A model the table does not have costs `None` — unknown, never zero: `threadgate usage`
says how many requests it could not price, and the spend limits cannot count them. A
dated name (`claude-sonnet-4-5-20250929`, `gpt-4.1-mini-2025-04-14`) has its undated
entry's price; any other name must be in the table as it is configured.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

_MILLION = Decimal(1_000_000)
# A snapshot's date after the model's name: -20250929, -2025-04-14.
_DATED = re.compile(r"-\d{4}-?\d{2}-?\d{2}$")


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens; None for the cache prices: as `input`."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None

    def cost(
        self, input_tokens: int, output_tokens: int, cached_tokens: int = 0, written: int = 0
    ) -> Decimal:
        """USD for one answer's tokens (`input_tokens` the whole prompt, as `Usage` has it)."""
        uncached = max(0, input_tokens - cached_tokens - written)
        cached = self.input if self.cached_input is None else self.cached_input
        write = self.input if self.cache_write is None else self.cache_write
        total = uncached * self.input + cached_tokens * cached + written * write
        return (total + output_tokens * self.output) / _MILLION


def _price(input: str, cached: str, output: str, write: str | None = None) -> Price:
    return Price(Decimal(input), Decimal(output), Decimal(cached), Decimal(write or input))


# USD per million tokens: input, cached input, output (and Anthropic's cache write).
DEFAULT_PRICES: Mapping[str, Price] = {
    "openai:gpt-5": _price("1.25", "0.125", "10"),
    "openai:gpt-5-mini": _price("0.25", "0.025", "2"),
    "openai:gpt-5-nano": _price("0.05", "0.005", "0.40"),
    "openai:gpt-4.1": _price("2", "0.50", "8"),
    "openai:gpt-4.1-mini": _price("0.40", "0.10", "1.60"),
    "openai:gpt-4.1-nano": _price("0.10", "0.025", "0.40"),
    "openai:gpt-4o": _price("2.50", "1.25", "10"),
    "openai:gpt-4o-mini": _price("0.15", "0.075", "0.60"),
    "openai:o3": _price("2", "0.50", "8"),
    "openai:o4-mini": _price("1.10", "0.275", "4.40"),
    "anthropic:claude-opus-4-5": _price("5", "0.50", "25", "6.25"),
    "anthropic:claude-opus-4-1": _price("15", "1.50", "75", "18.75"),
    "anthropic:claude-opus-4": _price("15", "1.50", "75", "18.75"),
    "anthropic:claude-sonnet-4-5": _price("3", "0.30", "15", "3.75"),
    "anthropic:claude-sonnet-4": _price("3", "0.30", "15", "3.75"),
    "anthropic:claude-3-7-sonnet": _price("3", "0.30", "15", "3.75"),
    "anthropic:claude-haiku-4-5": _price("1", "0.10", "5", "1.25"),
    "anthropic:claude-3-5-haiku": _price("0.80", "0.08", "4", "1"),
}


class PriceTable:
    """Prices by `provider:model`."""

    def __init__(self, prices: Mapping[str, Price] = DEFAULT_PRICES) -> None:
        self._prices = dict(prices)

    def price(self, route: str) -> Price | None:
        """The price of `route` (`provider:model`), a dated model's undated one, or None."""
        found = self._prices.get(route)
        if found is None and _DATED.search(route):
            found = self._prices.get(_DATED.sub("", route))
        return found

    def cost(
        self,
        route: str,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        written: int = 0,
    ) -> Decimal | None:
        """USD for one answer of `route`'s model; None when its price is unknown."""
        price = self.price(route)
        if price is None:
            return None
        return price.cost(input_tokens, output_tokens, cached_tokens, written)

    def with_entries(self, prices: Mapping[str, Price]) -> PriceTable:
        """This table with `prices` added, replacing entries of the same name."""
        return PriceTable({**self._prices, **prices})


DEFAULT_PRICE_TABLE = PriceTable()

_FIELDS = {"input", "cached_input", "cache_write", "output"}


def parse_prices(text: str) -> dict[str, Price]:
    """Entries from JSON: `{"provider:model": {"input": 3, "cached_input": 0.3,
    "cache_write": 3.75, "output": 15}}`, USD per million tokens (the cache prices are
    optional: as `input`). A `ValueError` says what is wrong."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"it is not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError('it must be a JSON object like {"openai:gpt-4.1": {"input": 2, …}}')
    return {str(name): _entry(str(name), fields) for name, fields in raw.items()}


def _entry(name: str, fields: Any) -> Price:
    if ":" not in name:
        raise ValueError(f"{name!r} is not provider:model")
    if not isinstance(fields, dict) or not {"input", "output"} <= fields.keys():
        raise ValueError(f"{name} needs at least input and output (USD per million tokens)")
    unknown = fields.keys() - _FIELDS
    if unknown:
        raise ValueError(
            f"{name} has {', '.join(sorted(unknown))}; known: {', '.join(sorted(_FIELDS))}"
        )
    values = {key: _usd(name, key, value) for key, value in fields.items()}
    return Price(
        values["input"], values["output"], values.get("cached_input"), values.get("cache_write")
    )


def _usd(name: str, key: str, value: Any) -> Decimal:
    try:
        amount = Decimal(str(value)) if isinstance(value, int | float | str) else None
    except InvalidOperation:
        amount = None
    if amount is None or isinstance(value, bool) or not amount.is_finite() or amount < 0:
        raise ValueError(f"{name} {key} must be a number of USD per million tokens, not {value!r}")
    return amount
