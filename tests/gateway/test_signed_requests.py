"""What reaches `/slack/events` before it is known to come from Slack: signing headers of
any shape, bodies of any length. Nothing unauthenticated gets past a 4xx or is stored, the
headers are judged before the body is read, and the body is read only up to its limit.

Requests are written byte by byte on a socket, so header values can be anything HTTP can
carry (non-ASCII, 5,000 digits, sent twice) and a body can be one that never ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.process.http import MAX_BODY_BYTES
from tests.fakes.slack_events import app_mention_event, event_callback, sign
from tests.gateway.rig import SECRET, Rig
from tests.logged import errors_logged

TIMESTAMP = b"X-Slack-Request-Timestamp"
SIGNATURE = b"X-Slack-Signature"


def envelope_bytes() -> bytes:
    return json.dumps(event_callback(app_mention_event(text="<@UBOT> hi"))).encode()


@dataclass(frozen=True)
class Fresh:
    """A timestamp `offset` seconds from the moment the request is sent."""

    offset: int


HeaderValue = str | bytes | Fresh

header_values: st.SearchStrategy[HeaderValue] = st.one_of(
    st.text(max_size=80),
    st.binary(max_size=80),
    st.text(alphabet="0123456789", min_size=1, max_size=5000),
    st.integers().map(str),
    st.builds(Fresh, st.integers(-1000, 1000)),
    st.text(alphabet="0123456789abcdef", min_size=64, max_size=64).map("v0=".__add__),
    st.text(alphabet="0123456789abcdefABCDEFé", min_size=60, max_size=68).map("v0=".__add__),
    st.sampled_from(
        [
            "9" * 5000,
            "١٧٠٠٠٠٠٠٠٠",  # Arabic-Indic digits: int() takes them
            "1_700_000_000",
            "+1700000000",
            "1e9",
            "",
            "v0=",
            "v0=" + "é" * 64,
            "v1=" + "a" * 64,
        ]
    ),
)
# Absent, once, or twice.
header_lists = st.lists(header_values, max_size=2)


def header_bytes(value: HeaderValue) -> bytes:
    if isinstance(value, Fresh):
        raw = str(int(time.time()) + value.offset).encode()
    elif isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
    else:
        raw = value
    # CR and LF would end the header and start another: a different request, not a value.
    return raw.replace(b"\r", b"").replace(b"\n", b"")


async def raw_post(
    port: int,
    headers: list[tuple[bytes, bytes]],
    body: bytes = b"",
    *,
    content_length: int | None = None,
    endless: bool = False,
) -> int:
    """POST to /slack/events on a bare socket; the response's status. An `endless` body is
    chunked and never finishes: only a server that answers before reading it all answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    feeder: asyncio.Task[None] | None = None
    try:
        lines = [b"POST /slack/events HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
        lines.append(b"Content-Type: application/json")
        if endless:
            lines.append(b"Transfer-Encoding: chunked")
        else:
            length = len(body) if content_length is None else content_length
            lines.append(b"Content-Length: %d" % length)
        lines += [name + b": " + value for name, value in headers]
        writer.write(b"\r\n".join(lines) + b"\r\n\r\n")
        if endless:
            feeder = asyncio.create_task(feed_forever(writer))
        else:
            writer.write(body)
        async with asyncio.timeout(60):
            status_line = await reader.readline()
    finally:
        if feeder is not None:
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    assert status_line.startswith(b"HTTP/1."), status_line
    return int(status_line.split()[1])


async def feed_forever(writer: asyncio.StreamWriter) -> None:
    frame = b"%x\r\n%s\r\n" % (1 << 16, b" " * (1 << 16))
    with contextlib.suppress(ConnectionError):
        while True:
            writer.write(frame)
            await writer.drain()


def signed(body: bytes, *, at: int | None = None) -> list[tuple[bytes, bytes]]:
    headers = sign(body, SECRET, int(time.time()) if at is None else at)
    return [(name.encode(), value.encode()) for name, value in headers.items()]


async def stored(rig: Rig) -> int:
    return sum([await rig.count(t) for t in ("seen_events", "sessions", "tasks", "messages")])


async def test_any_signing_headers_but_slacks_get_400_or_401_and_store_nothing(rig: Rig) -> None:
    """Property: whatever the timestamp and signature headers hold (absent, twice,
    non-numeric, 5,000 digits, non-ASCII, well-formed but wrong), the answer is 400 or 401,
    nothing is stored and nothing is logged as an error."""
    assert rig.gateway.port is not None
    port, body, loop = rig.gateway.port, envelope_bytes(), asyncio.get_running_loop()
    before = await stored(rig)
    statuses: list[int] = []

    @settings(
        max_examples=150,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(header_lists, header_lists)
    def each(timestamps: list[HeaderValue], signatures: list[HeaderValue]) -> None:
        headers = [(TIMESTAMP, header_bytes(v)) for v in timestamps]
        headers += [(SIGNATURE, header_bytes(v)) for v in signatures]
        status = asyncio.run_coroutine_threadsafe(raw_post(port, headers, body), loop).result(60)
        statuses.append(status)
        assert status in (400, 401), (status, headers)

    with errors_logged() as errors:
        await asyncio.to_thread(each)
    assert {400, 401} <= set(statuses)  # both kinds of refusal were exercised
    assert await stored(rig) == before
    assert [r.getMessage() for r in errors] == []


@pytest.mark.parametrize(
    "case",
    ["non-numeric", "5,000 digits", "non-ASCII signature", "Arabic-Indic digits"],
)
async def test_malformed_signing_headers_are_400_not_500(rig: Rig, case: str) -> None:
    """The headers that used to crash the verifier: each one is a 400."""
    assert rig.gateway.port is not None
    body = envelope_bytes()
    good = dict(signed(body))
    value = {
        "non-numeric": (TIMESTAMP, b"abc"),
        "5,000 digits": (TIMESTAMP, b"9" * 5000),
        "non-ASCII signature": (SIGNATURE, "v0=é".encode()),
        "Arabic-Indic digits": (TIMESTAMP, "١٧٠٠٠٠٠٠٠٠".encode()),
    }[case]
    headers = list({**good, value[0]: value[1]}.items())
    assert await raw_post(rig.gateway.port, headers, body) == 400


async def test_missing_or_stale_headers_are_refused_before_the_body_is_read(rig: Rig) -> None:
    """With a body that never ends, no signature or a stale one is still answered 401:
    the headers were judged without waiting for the body."""
    assert rig.gateway.port is not None
    stale = signed(b"", at=int(time.time()) - 600)
    assert await raw_post(rig.gateway.port, [], endless=True) == 401
    assert await raw_post(rig.gateway.port, stale, endless=True) == 401


async def test_a_body_over_the_limit_is_refused_without_reading_it_all(rig: Rig) -> None:
    """A declared length over the limit is 413 without a byte sent; an endless body is 413
    as soon as it passes the limit; a body of exactly the limit is read and answered."""
    assert rig.gateway.port is not None
    port = rig.gateway.port
    headers = signed(b"")  # fresh and well-formed: the body is what is refused
    assert await raw_post(port, headers, content_length=MAX_BODY_BYTES + 1) == 413
    assert await raw_post(port, headers, endless=True) == 413
    largest = envelope_bytes().ljust(MAX_BODY_BYTES)  # JSON allows trailing whitespace
    assert await raw_post(port, signed(largest), largest) == 200
