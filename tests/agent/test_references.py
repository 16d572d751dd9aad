"""The reference catalog: `[ref N]` numbers for the messages a round is shown."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.core.errors import ControlCallError
from agent.core.ports import MessageKind, Role, StoredMessage
from agent.rounds.references import ReferenceCatalog


def message(n: int, kind: MessageKind = "turn", text: str | None = None) -> StoredMessage:
    role: Role = "user" if kind == "turn" else "assistant"
    return StoredMessage(f"m{n}", "s", role, kind, text if text is not None else f"text {n}")


WINDOW = [message(1), message(2, "ack"), message(3, "reply"), message(4)]


def test_messages_are_numbered_oldest_first_without_acknowledgments() -> None:
    """Numbers start at 1 with the oldest message; acknowledgments get none."""
    catalog = ReferenceCatalog.from_window(WINDOW)
    assert [catalog.number_of(m) for m in WINDOW] == [1, None, 2, 3]


def test_label_prefixes_numbered_messages_only() -> None:
    """The model sees `[ref N] ` before numbered messages and the bare text otherwise."""
    catalog = ReferenceCatalog.from_window(WINDOW)
    assert [catalog.label(m) for m in WINDOW] == [
        "[ref 1] text 1",
        "text 2",
        "[ref 2] text 3",
        "[ref 3] text 4",
    ]


def test_resolve_returns_stored_texts_in_citation_order_once_each() -> None:
    """resolve maps numbers to stored texts, keeping the order cited, without repeats."""
    catalog = ReferenceCatalog.from_window(WINDOW)
    assert catalog.resolve([3, 1, 3]) == ("text 4", "text 1")
    assert catalog.resolve([]) == ()


@pytest.mark.parametrize("numbers", [[0], [4], [-1], [2, 9]])
def test_unknown_numbers_list_the_valid_ones(numbers: list[int]) -> None:
    """An unknown number is a ControlCallError naming it and listing the valid numbers."""
    catalog = ReferenceCatalog.from_window(WINDOW)
    with pytest.raises(ControlCallError, match=r"does not exist.*the valid numbers are 1, 2, 3"):
        catalog.resolve(numbers)


def test_an_empty_catalog_says_refs_cannot_be_used() -> None:
    """With nothing to cite the model is told to leave refs out."""
    with pytest.raises(ControlCallError, match="leave `refs` out"):
        ReferenceCatalog().resolve([1])


def test_a_long_catalog_gives_the_range() -> None:
    """Past twenty messages the valid numbers are given as a range."""
    catalog = ReferenceCatalog.from_window([message(n) for n in range(30)])
    assert catalog.valid_numbers() == "the valid numbers are 1 to 30"


KINDS = st.sampled_from(["turn", "ack", "reply"])


@given(st.lists(st.tuples(KINDS, st.text()), max_size=30))
def test_every_non_ack_message_resolves_to_its_text(items: list[tuple[MessageKind, str]]) -> None:
    """For any window, 1..n resolve to the non-ack texts in order."""
    window = [message(n, kind, text) for n, (kind, text) in enumerate(items)]
    catalog = ReferenceCatalog.from_window(window)
    expected = [m.text for m in window if m.kind != "ack"]
    numbers = list(range(1, len(expected) + 1))
    assert [catalog.resolve([n])[0] for n in numbers] == expected
