"""The SSE decoder: framing rules, and that any split of the bytes gives the same events."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.models.providers.sse import ServerSentEvent, SSEDecoder


def decode(*chunks: bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    return [event for chunk in chunks for event in decoder.feed(chunk)] + decoder.close()


def test_data_lines_are_dispatched_on_a_blank_line() -> None:
    """An event is complete at the blank line, not before."""
    decoder = SSEDecoder()
    assert decoder.feed(b"data: one\n") == []
    assert decoder.feed(b"\n") == [ServerSentEvent(data="one")]


def test_several_events_in_one_chunk() -> None:
    """One read carrying several events yields all of them, in order."""
    events = decode(b"data: a\n\ndata: b\n\nevent: ping\ndata: {}\n\n")
    assert events == [
        ServerSentEvent(data="a"),
        ServerSentEvent(data="b"),
        ServerSentEvent(event="ping", data="{}"),
    ]


def test_comments_are_keep_alives_and_ignored() -> None:
    """A `:` line is a keep-alive comment and produces nothing."""
    assert decode(b": keep-alive\n\n: OPENROUTER PROCESSING\n\ndata: x\n\n") == [
        ServerSentEvent(data="x")
    ]


def test_multi_line_data_is_joined_with_newlines() -> None:
    """Several `data:` lines in one event join with a line feed."""
    assert decode(b"data: a\ndata:b\n\n") == [ServerSentEvent(data="a\nb")]


def test_crlf_and_cr_line_ends() -> None:
    """CRLF and lone CR end lines as LF does, even when a CRLF is split across reads."""
    assert decode(b"data: a\r", b"\n\r\ndata: b\r\r") == [
        ServerSentEvent(data="a"),
        ServerSentEvent(data="b"),
    ]


def test_utf8_split_inside_a_character() -> None:
    """A multi-byte character split across reads decodes intact."""
    raw = "data: héllo 🌍\n\n".encode()
    cut = raw.index("🌍".encode()) + 2
    assert decode(raw[:cut], raw[cut:]) == [ServerSentEvent(data="héllo 🌍")]


def test_unterminated_event_is_pending_not_dispatched() -> None:
    """An event without its blank line is held back and reported as pending."""
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"partial') == []
    assert decoder.pending


def test_bom_and_id_field() -> None:
    """A leading byte-order mark is dropped and `id` is remembered."""
    assert decode(b"\xef\xbb\xbfid: 7\ndata: x\n\n") == [ServerSentEvent(data="x", id="7")]


_text = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)))
_events = st.lists(st.tuples(st.sampled_from(["message", "ping", "error"]), _text), max_size=8)


def _encode(events: list[tuple[str, str]], newline: str) -> bytes:
    lines = [f"event: {name}{newline}data: {data}{newline}{newline}" for name, data in events]
    return "".join(lines).encode()


@given(_events, st.sampled_from(["\n", "\r\n", "\r"]), st.data())
def test_any_split_gives_the_same_events(
    events: list[tuple[str, str]], newline: str, data: st.DataObject
) -> None:
    """However the bytes are cut into reads, the decoded events are the ones encoded."""
    raw = _encode(events, newline)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=10)))
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    expected = [ServerSentEvent(name, value) for name, value in events]
    assert decode(*pieces) == expected


@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=6))
def test_arbitrary_bytes_never_raise_and_split_does_not_matter(raw: bytes, cuts: list[int]) -> None:
    """Untrusted bytes never crash the decoder, and splitting them changes nothing."""
    points = sorted(min(c, len(raw)) for c in cuts)
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    assert decode(*pieces) == decode(raw)
