"""`StringFieldDecoder`: the `text` of a tool call's arguments, decoded as the arguments
arrive — for any value, any other fields, any serialization and any split."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from agent.models.partial_json import StringFieldDecoder

ABSENT = object()
PLACEHOLDER = "\x00@@text@@\x00"


@dataclass
class Fed:
    """What the decoder said after each fragment."""

    pieces: list[str]
    complete: list[bool]
    failed: bool

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def feed(fragments: Sequence[str], field: str = "text") -> Fed:
    decoder = StringFieldDecoder(field)
    pieces, complete = [], []
    for fragment in fragments:
        pieces.append(decoder.feed(fragment))
        complete.append(decoder.complete)
    return Fed(pieces, complete, decoder.failed)


def split(data: st.DataObject, doc: str) -> list[str]:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(doc)), max_size=12)))
    return [doc[a:b] for a, b in zip([0, *cuts], [*cuts, len(doc)], strict=True)]


# Values: any code point (lone surrogates included), and the characters that need escaping.
SPECIAL = st.sampled_from(['"', "\\", "/", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f"])
SPECIAL_TEXT = st.sampled_from(["</turn>", "\ud83d", "\ude00", "😀", '\\"', "\\u0041", "{}"])
VALUES = st.lists(st.characters(exclude_categories=()) | SPECIAL | SPECIAL_TEXT, max_size=40).map(
    "".join
)

SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8)
)
KEYS = st.sampled_from(["text", "references", "url"]) | st.text(max_size=6)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def serializations(draw: st.DrawFn) -> dict[str, Any]:
    """`json.dumps` options: ensure_ascii either way, compact, default or with extra
    whitespace (JSON allows space, tab, CR and LF between tokens)."""
    layout: dict[str, Any] = draw(
        st.sampled_from(
            [
                {},
                {"separators": (",", ":")},
                {"indent": 2},
                {"indent": "\t"},
                {"separators": (" \r\n,\t", " \n:  ")},
            ]
        )
    )
    options: dict[str, Any] = {"ensure_ascii": draw(st.booleans()), **layout}
    return options


@dataclass
class Document:
    json: str
    value: str
    closing_quote: int  # the index of the value's closing quote in `json`


@st.composite
def documents(draw: st.DrawFn) -> Document:
    """An object with a string `text` anywhere among other top-level fields (which may hold
    nested objects with their own `text`), serialized any allowed way."""
    value = draw(VALUES)
    others = draw(st.dictionaries(KEYS.filter(lambda k: k != "text"), JSON, max_size=4))
    items = list(others.items())
    items.insert(draw(st.integers(0, len(items))), ("text", PLACEHOLDER))
    options = draw(serializations())
    skeleton = json.dumps(dict(items), **options)
    placeholder = json.dumps(PLACEHOLDER, ensure_ascii=options["ensure_ascii"])
    assume(skeleton.count(placeholder) == 1)
    encoded = json.dumps(value, ensure_ascii=options["ensure_ascii"])
    start = skeleton.index(placeholder)
    doc = skeleton.replace(placeholder, encoded)
    # The value the JSON means: json.dumps(ensure_ascii) writes two raw surrogate halves
    # as two escapes, which json.loads (and the decoder) read back as one character.
    return Document(doc, json.loads(doc)["text"], start + len(encoded) - 1)


@given(documents(), st.data())
def test_any_split_decodes_the_value_in_prefixes(doc: Document, data: st.DataObject) -> None:
    """Fed in any fragments, the pieces join to the value, every partial join is a prefix of
    it, and `complete` turns true exactly with the fragment holding the closing quote."""
    fragments = split(data, doc.json)
    fed = feed(fragments)
    assert fed.text == doc.value and not fed.failed
    fed_so_far = 0
    for index, fragment in enumerate(fragments):
        fed_so_far += len(fragment)
        assert doc.value.startswith("".join(fed.pieces[: index + 1]))
        assert fed.complete[index] == (fed_so_far > doc.closing_quote)


@given(documents(), st.data())
def test_a_truncated_document_gives_a_prefix_and_no_error(
    doc: Document, data: st.DataObject
) -> None:
    """Cut anywhere, the input gives a prefix of the value, complete only if the cut is
    after the closing quote, and never `failed`."""
    cut = data.draw(st.integers(0, len(doc.json)))
    fed = feed(split(data, doc.json[:cut]))
    assert doc.value.startswith(fed.text) and not fed.failed
    assert any(fed.complete) == (cut > doc.closing_quote)


@given(JSON.filter(lambda v: not isinstance(v, dict)), serializations(), st.data())
def test_a_value_that_is_not_an_object_fails(
    value: object, options: dict[str, Any], data: st.DataObject
) -> None:
    """An array, string, number or literal is not arguments: failed, nothing decoded."""
    fed = feed(split(data, json.dumps(value, **options)))
    assert fed.failed and fed.text == "" and not any(fed.complete)


@given(JSON.filter(lambda v: not isinstance(v, str)), serializations(), st.data())
def test_a_text_field_that_is_not_a_string_fails(
    value: object, options: dict[str, Any], data: st.DataObject
) -> None:
    """`text` holding a number, object, array or literal: failed, nothing decoded."""
    fed = feed(split(data, json.dumps({"references": [], "text": value}, **options)))
    assert fed.failed and fed.text == "" and not any(fed.complete)


@given(documents(), st.data())
def test_a_corrupted_document_never_raises_or_lies(doc: Document, data: st.DataObject) -> None:
    """A character inserted, dropped or replaced anywhere: no exception. If the result is
    still JSON, the decoder reads it as json.loads would (the first `text` streams); if
    not, damage after the closing quote changes nothing, since the value was complete."""
    at = data.draw(st.integers(0, len(doc.json)))
    junk = data.draw(st.sampled_from(['"', "\\", "{", "}", "[", "]", ",", ":", "x", "0", "\x01"]))
    mode = data.draw(st.sampled_from(["insert", "drop", "replace"]))
    damaged = doc.json[:at] + (junk if mode != "drop" else "") + doc.json[at + (mode != "insert") :]
    fed = feed(split(data, damaged))
    first = _first_text(damaged)
    if isinstance(first, str):
        assert (fed.text, any(fed.complete), fed.failed) == (first, True, False)
    elif first is ABSENT:
        assert not any(fed.complete)
    elif at > doc.closing_quote:
        assert (fed.text, any(fed.complete)) == (doc.value, True)


def _first_text(doc: str) -> object:
    """The first top-level `text` of `doc` if it is a JSON object with one; None if it is
    not JSON; `ABSENT` when it is JSON without a string `text` first."""
    try:
        pairs = json.loads(doc, object_pairs_hook=lambda p: p)
    except ValueError:
        return None
    if not isinstance(pairs, list):
        return ABSENT
    first = next((v for k, v in pairs if k == "text"), None)
    return first if isinstance(first, str) else ABSENT


@given(st.text(max_size=60), st.data())
def test_arbitrary_input_never_raises(text: str, data: st.DataObject) -> None:
    """Untrusted fragments never raise; what comes out is the decoded prefix of a value."""
    fed = feed(split(data, text))
    assert isinstance(fed.text, str)
    if fed.text:
        assert text.lstrip(" \t\r\n").startswith("{")


@pytest.mark.parametrize(
    ("escape", "decoded"),
    [
        ('\\"', '"'),
        ("\\\\", "\\"),
        ("\\/", "/"),
        ("\\b\\f\\n\\r\\t", "\b\f\n\r\t"),
        ("\\u00e9\\u00E9", "éé"),
        ("\\ud83d\\ude00", "😀"),
        ("\\ud83dx", "\ud83dx"),  # a lone high half is kept, as json.loads keeps it
        ("\\ud83d\\n", "\ud83d\n"),
        ("\\ud83d\\ud83d\\ude00", "\ud83d😀"),
        ("\\ude00\\ud83d", "\ude00\ud83d"),
    ],
)
def test_every_escape_in_one_character_fragments(escape: str, decoded: str) -> None:
    """Each escape decodes as json.loads decodes it, fed a character at a time."""
    doc = '{"text": "' + escape + '"}'
    assert json.loads(doc)["text"] == decoded
    fed = feed(list(doc))
    assert fed.text == decoded and fed.complete[-1]


def test_a_split_surrogate_pair_is_held_until_both_halves_are_known() -> None:
    """Whatever the split of an escaped pair, no piece holds half of it."""
    doc = '{"text": "a\\ud83d\\ude00b"}'
    for cut in range(len(doc) + 1):
        fed = feed([doc[:cut], doc[cut:]])
        assert fed.text == "a😀b"
        assert all("\ud83d" not in piece for piece in fed.pieces)


def test_the_first_of_duplicate_keys_streams() -> None:
    """Only the first top-level `text` streams (json.loads keeps the last: the caller
    reconciles); `text` keys in nested objects are not the field."""
    doc = '{"references": [{"text": "nested"}], "meta": {"text": "inner"}, "text": "one",'
    doc += ' "text": "two"}'
    fed = feed([doc])
    assert fed.text == "one" and fed.complete[-1] and json.loads(doc)["text"] == "two"


def test_an_escaped_key_is_the_field() -> None:
    """The key is compared decoded: `"\\u0074ext"` is `text`."""
    assert feed(['{"\\u0074ext": "hi"}']).text == "hi"


def test_an_absent_field_is_neither_complete_nor_failed() -> None:
    fed = feed(['{"references": [], "other": "x"}'])
    assert (fed.text, fed.complete[-1], fed.failed) == ("", False, False)


@pytest.mark.parametrize(
    "doc",
    [
        '{"a": 01, "text": "x"}',
        '{"a": tru, "text": "x"}',
        '{"a" 1, "text": "x"}',
        '{"a": 1,, "text": "x"}',
        '{"a": [1}, "text": "x"}',
        '{"a": "\\q", "text": "x"}',
        "{'text': 'x'}",
        '{"text": "a\nb"}',
    ],
)
def test_invalid_json_before_or_in_the_value_fails(doc: str) -> None:
    """Invalid JSON stops the decoder (failed), without raising, and nothing past it."""
    fed = feed(list(doc))
    assert fed.failed and "x" not in fed.text and not fed.complete[-1]


def test_a_long_reply_in_one_character_fragments() -> None:
    """A 100 kB reply fed a character at a time decodes exactly (the decoder keeps its
    state; nothing is re-read)."""
    value = 'Ünïcode line with "quotes" and \\ 😀\n' * 2800
    doc = json.dumps({"references": [{"text": "x"}], "text": value})
    assert len(doc) > 100_000
    assert feed(list(doc)).text == value
