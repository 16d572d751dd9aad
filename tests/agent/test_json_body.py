"""A model request's body, encoded by orjson, is the JSON httpx's `json=` would have sent."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

from agent.models.providers.provider import json_body

# Text as people write it (any code point a JSON string can carry: no lone surrogates).
_TEXT = st.text(st.characters(exclude_categories=["Cs"]))
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    _TEXT,
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(_TEXT, inner, max_size=4),
    ),
    max_leaves=20,
)
_BODIES = st.dictionaries(_TEXT, _VALUES, max_size=6)


def httpx_json(body: dict[str, Any]) -> bytes:
    return httpx.Request("POST", "http://model.test/", json=body).content


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_float(v) for v in value)
    return False


@given(_BODIES)
def test_the_body_is_the_json_httpx_sent(body: dict[str, Any]) -> None:
    """Any body of people's text, numbers and nesting reads back as the value httpx's
    encoding reads back as, and is the same bytes where no float is spelled."""
    encoded = json_body(body)
    assert json.loads(encoded) == json.loads(httpx_json(body))
    if not _has_float(body):
        assert encoded == httpx_json(body)


def test_what_orjson_refuses_is_encoded_by_the_standard_library() -> None:
    """An integer past 64 bits, which orjson refuses, is still sent, as httpx sent it."""
    body = {"seed": 2**70, "text": "<turn>é"}
    assert json_body(body) == httpx_json(body)


def test_a_float_keeps_its_value() -> None:
    """A sampling setting's float is the same number after encoding."""
    body = {"temperature": 0.1 + 0.2, "top_p": 1e-5}
    decoded = json.loads(json_body(body))
    assert math.isclose(decoded["temperature"], 0.1 + 0.2, rel_tol=0)
    assert decoded["top_p"] == 1e-5
