"""The model providers' aiohttp transport behind httpx's API
(`gateway/models/transport.py`): each failure surfaces as the httpx exception
httpx's own transport raises for it, a stream arrives chunk by chunk and slows once the
reply it is shown in shows, and no connection or session outlives its use.

Everything runs against the loopback OpenAI fake through the real httpx client; nothing of
ours is patched. Where a test needs "the connection came back", it limits the pool to one
connection and makes a second request: a leaked connection would end it in `PoolTimeout`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
import httpx
import pytest
from aiohttp import web
from httpx_aiohttp.transport import AiohttpResponseStream
from httpx_sse import EventSource
from pydantic import SecretStr

from agent.core.errors import Route, TransientModelError
from agent.core.ports import Showing
from agent.models.contract import SystemMessage, UserMessage
from agent.models.providers.openai import OpenAIModel
from agent.models.providers.provider import OpenAIProvider
from agent.rounds.control import FinalReply, Reply
from agent.rounds.loop import run_round
from gateway.models.transport import (
    AIOHTTP_ERRORS,
    SHOWING,
    ModelTransport,
    StreamPace,
    httpx_error,
    model_transport,
)
from tests.agent.memory import MemoryDraft
from tests.fakes.openai_api import (
    Completion,
    FakeToolCall,
    Gated,
    Hang,
    Held,
    JSONReply,
    OpenAIServer,
    RawReply,
    RecordedRequest,
    StreamReply,
    sse,
)
from tests.netguard.loopback_guard import NonLoopbackConnection

ROUTE = Route("openai", "gpt-test")
API_KEY = "sk-transport-secret-4242"
GATEWAY_TOKEN = "Bearer gw-transport-secret-7777"
DEADLINE = 10.0  # a bound on waiting for a condition, never an assertion about time


@asynccontextmanager
async def client(
    url: str, *, timeouts: httpx.Timeout | float = 5.0, connections: int | None = 100
) -> AsyncIterator[tuple[httpx.AsyncClient, ModelTransport]]:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=20)
    transport = ModelTransport(base_url=url, limits=limits)
    async with httpx.AsyncClient(base_url=url, timeout=timeouts, transport=transport) as http:
        yield http, transport


def provider(url: str) -> OpenAIProvider:
    return OpenAIProvider(
        base_url=url,
        api_key=SecretStr(API_KEY),
        gateway_header="cf-aig-authorization",
        gateway_token=SecretStr(GATEWAY_TOKEN),
        timeout=5.0,
        transport=ModelTransport(base_url=url),
    )


def assert_no_secret(exc: BaseException) -> None:
    """Neither the error nor anything it was raised from repeats a credential."""
    seen: BaseException | None = exc
    while seen is not None:
        for text in (str(seen), repr(seen)):
            assert API_KEY not in text and "gw-transport-secret" not in text
        seen = seen.__cause__ or seen.__context__


@dataclass(frozen=True)
class Arrived:
    """Set `arrived` once the request is in, then answer like `Held`."""

    arrived: asyncio.Event
    release: asyncio.Event
    then: JSONReply

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        self.arrived.set()
        return await Held(self.release, self.then).send(request, seen)


@dataclass(frozen=True)
class HangUp:
    """Read the request, then drop the connection without a word."""

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.abort()
        return web.Response(status=500)


@asynccontextmanager
async def one_connection_in_use(
    *, pool_timeout: float
) -> AsyncIterator[tuple[httpx.AsyncClient, asyncio.Task[httpx.Response], asyncio.Event]]:
    """A client allowed one connection, in use by a request the server holds until the
    event is set (then answers `{"ok": 1}`); the request after it is answered `{"ok": 2}`."""
    release, arrived = asyncio.Event(), asyncio.Event()
    async with OpenAIServer() as server:
        server.script(Arrived(arrived, release, JSONReply({"ok": 1})), JSONReply({"ok": 2}))
        timeouts = httpx.Timeout(5.0, pool=pool_timeout)
        try:
            async with client(server.url, timeouts=timeouts, connections=1) as (http, _):
                first = asyncio.create_task(http.post("/chat/completions", json={}))
                await asyncio.wait_for(arrived.wait(), DEADLINE)
                yield http, first, release
        finally:
            release.set()


async def test_a_refused_connection_is_connect_error() -> None:
    """Nothing listening: `ConnectError` (httpx_aiohttp alone says `ConnectTimeout`), and
    the provider's message names it, with no credential in the chain."""
    async with OpenAIServer() as server:
        url = server.url
    async with client(url) as (http, _):
        with pytest.raises(httpx.ConnectError, match="could not connect") as raised:
            await http.post("/chat/completions", json={})
    assert raised.value.request.url.path == "/v1/chat/completions"
    model = provider(url)
    with pytest.raises(TransientModelError, match=r"could not be reached \(ConnectError\)") as err:
        await model.post("/chat/completions", {"x": 1}, ROUTE)
    assert_no_secret(err.value)
    await model.aclose()


async def test_no_answer_is_read_timeout() -> None:
    """A server that reads the request and never answers: `ReadTimeout`."""
    async with (
        OpenAIServer() as server,
        client(server.url, timeouts=httpx.Timeout(5.0, read=0.05)) as (http, _),
    ):
        server.script(Hang())
        with pytest.raises(httpx.ReadTimeout):
            await http.post("/chat/completions", json={})


async def test_a_stream_that_stalls_is_read_timeout() -> None:
    """The read timeout bounds each read of a stream's body too, not only the headers."""
    release = asyncio.Event()
    async with OpenAIServer() as server:
        server.script(Gated(Completion(text="abcdefgh"), release, before=1))
        async with client(server.url, timeouts=httpx.Timeout(5.0, read=0.05)) as (http, _):
            body = {"stream": True}
            async with http.stream("POST", "/chat/completions", json=body) as response:
                with pytest.raises(httpx.ReadTimeout):
                    async for _ in response.aiter_raw():
                        pass
        release.set()


async def test_a_hang_up_before_the_answer_is_remote_protocol_error() -> None:
    async with OpenAIServer() as server, client(server.url) as (http, _):
        server.script(HangUp())
        with pytest.raises(httpx.RemoteProtocolError) as raised:
            await http.post("/chat/completions", json={})
    assert_no_secret(raised.value)


async def test_a_stream_cut_mid_body_is_remote_protocol_error() -> None:
    """A server that drops the connection half way through a stream: the chunks before it
    arrive, then `RemoteProtocolError` (httpx_aiohttp alone says `ConnectTimeout`)."""
    chunks = sse({"n": 1}, {"n": 2}, done=False)
    async with OpenAIServer() as server, client(server.url) as (http, _):
        server.script(StreamReply(chunks, cut=True))
        received = b""
        async with http.stream("POST", "/chat/completions", json={"stream": True}) as response:
            with pytest.raises(httpx.RemoteProtocolError):
                async for chunk in response.aiter_raw():
                    received += chunk
        assert received == b"".join(chunks)


async def test_the_provider_classifies_a_cut_stream_as_transient() -> None:
    async with OpenAIServer() as server:
        server.script(StreamReply(sse({"n": 1}, done=False), cut=True))
        model = provider(server.url)
        with pytest.raises(httpx.RemoteProtocolError) as raised:
            async with model.stream("/chat/completions", {"stream": True}, ROUTE) as response:
                async for _ in response.aiter_raw():
                    pass
        assert_no_secret(raised.value)
        await model.aclose()


async def test_a_full_pool_is_pool_timeout() -> None:
    """Waiting for a free connection is httpx's `pool` timeout, told apart from connecting."""
    async with one_connection_in_use(pool_timeout=0.05) as (http, first, release):
        with pytest.raises(httpx.PoolTimeout, match="all 1 in use"):
            await http.post("/chat/completions", json={})
        release.set()
        assert (await first).json() == {"ok": 1}
        assert (await http.post("/chat/completions", json={})).json() == {"ok": 2}


async def test_streaming_is_incremental() -> None:
    """Events reach the reader while the server is still holding the rest back: nothing is
    buffered to the end (the test would wait past its deadline if it were)."""
    release = asyncio.Event()
    completion = Completion(text="one two three four")
    async with OpenAIServer() as server, client(server.url) as (http, _):
        server.script(Gated(completion, release, before=2))
        async with asyncio.timeout(DEADLINE):
            async with http.stream("POST", "/chat/completions", json={"stream": True}) as resp:
                events = EventSource(resp).aiter_sse()
                first = [await anext(events), await anext(events)]
                assert not release.is_set()  # the server has sent only these two so far
                release.set()
                rest = [event async for event in events]
    assert [e.data for e in first + rest] == [c.decode()[6:-2] for c in completion.chunks()]


@dataclass(frozen=True)
class AfterTheFirstRead:
    """Stream the first `first` SSE events in one write; once `read` is set (the reader
    has them), and `silence` seconds later, the rest, in one write each."""

    completion: Completion
    read: asyncio.Event
    silence: float = 0.0
    first: int = 1

    async def send(self, request: web.Request, seen: RecordedRequest) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.content_type = "text/event-stream"
        await response.prepare(request)
        chunks = self.completion.chunks()
        rest = chunks[self.first :]
        await response.write(b"".join(chunks[: self.first]))
        await self.read.wait()
        if self.silence:
            await asyncio.sleep(self.silence)  # what is tested: a server silent a while
        for chunk in rest:
            await response.write(chunk)
        await response.write_eof()
        return response


async def paced_reads(
    server: OpenAIServer, first: asyncio.Event, read_timeout: float = 5.0
) -> list[bytes]:
    """The chunks a transport pacing its reads a second apart reads of a streamed
    answer, setting `first` once it has the first."""
    transport = ModelTransport(base_url=server.url, stream_pace=StreamPace(1.0, 1.0))
    timeout = httpx.Timeout(5.0, read=read_timeout)
    async with httpx.AsyncClient(base_url=server.url, transport=transport, timeout=timeout) as http:
        async with asyncio.timeout(DEADLINE):
            async with http.stream("POST", "/chat/completions", json={"stream": True}) as r:
                chunks = []
                async for chunk in r.aiter_raw():
                    chunks.append(chunk)
                    first.set()
    return chunks


async def test_an_event_stream_is_read_in_paced_batches() -> None:
    """With a pace, what arrives while the reader pauses is taken in one read: the events
    the server writes one by one after the first read reach the reader as one chunk (a
    pause of a second: far more than the server needs to write the rest)."""
    read = asyncio.Event()
    completion = Completion(text="one two three four five six seven")
    async with OpenAIServer() as server:
        server.script(AfterTheFirstRead(completion, read))
        chunks = await paced_reads(server, read)
    assert len(completion.chunks()) > 2
    assert b"".join(chunks) == b"".join(completion.chunks())
    assert len(chunks) == 2


async def test_a_paced_stream_leaves_its_socket_unread_between_reads() -> None:
    """While the transport waits out its pace it does not read the socket at all (the
    kernel keeps what comes), so aiohttp's read timeout, which counts the server's
    silences only while the socket is read, does not run: a server silent for longer than
    the read timeout during the pause does not cut the stream. Read all the while, it
    would be a `ReadTimeout`."""
    read = asyncio.Event()
    completion = Completion(text="one two three")
    async with OpenAIServer() as server:
        server.script(AfterTheFirstRead(completion, read, silence=0.5))
        chunks = await paced_reads(server, read, read_timeout=0.1)
    assert b"".join(chunks) == b"".join(completion.chunks())


async def test_a_stream_faster_than_its_pace_is_not_throttled() -> None:
    """A read that fills the whole read size is followed by the next at once: with a pause
    of a second after each, this answer (forty reads' worth, written as fast as the
    connection takes it) would not be read within the test's deadline."""
    event = sse({"choices": [{"delta": {"content": "x" * 200}}]}, done=False)[0]
    body = event * (40 * AiohttpResponseStream.CHUNK_SIZE // len(event)) + b"data: [DONE]\n\n"
    async with OpenAIServer() as server:
        server.script(RawReply(body, content_type="text/event-stream"))
        transport = ModelTransport(base_url=server.url, stream_pace=StreamPace(1.0, 1.0))
        async with httpx.AsyncClient(base_url=server.url, transport=transport) as http:
            async with asyncio.timeout(DEADLINE):
                async with http.stream("POST", "/chat/completions", json={"stream": True}) as r:
                    read = b"".join([chunk async for chunk in r.aiter_raw()])
    assert read == body


def test_a_stream_is_read_quickly_at_first_then_less_often() -> None:
    """Every 50 ms for the first half second after the first read (a reply's first words),
    every 250 ms after that, and from the moment the reply shows."""
    pace = StreamPace()
    assert [pace.pause(t) for t in (0.0, 0.49, 0.5, 30.0)] == [0.05, 0.05, 0.25, 0.25]
    assert pace.pause(0.0, shown=True) == 0.25


async def read_watching(
    server: OpenAIServer,
    pace: StreamPace,
    showing: Showing,
    first: asyncio.Event,
    *,
    shows: bool,
) -> bytes:
    """A streamed answer requested with `showing`, setting `first` once it has the first
    chunk; `shows`: the draft shows (is counted) then."""
    transport = ModelTransport(base_url=server.url, stream_pace=pace)
    async with httpx.AsyncClient(base_url=server.url, transport=transport) as http:
        async with asyncio.timeout(DEADLINE):
            async with http.stream(
                "POST", "/chat/completions", json={"stream": True}, extensions={SHOWING: showing}
            ) as r:
                chunks = []
                async for chunk in r.aiter_raw():
                    if shows and not chunks:
                        showing.shown()
                    chunks.append(chunk)
                    first.set()
    return b"".join(chunks)


async def test_a_stream_slows_to_the_later_pace_once_its_reply_shows() -> None:
    """Shown after its first read, the stream waits the later pace (none here), not the
    first one (an hour, which the test's deadline would not outlast)."""
    completion, read = Completion(text="one two three four"), asyncio.Event()
    async with OpenAIServer() as server:
        server.script(AfterTheFirstRead(completion, read))
        pace = StreamPace(3600.0, 0.0, until=3600.0)
        body = await read_watching(server, pace, Showing(), read, shows=True)
    assert body == b"".join(completion.chunks())


async def test_a_reply_shown_before_the_stream_was_requested_leaves_it_at_the_first_pace() -> None:
    """A draft that showed before the request (a step whose reply was taken back) leaves
    the next step's answer at the first pace (none here), not the later one (an hour)."""
    completion, read = Completion(text="one two three four"), asyncio.Event()
    showing = Showing()
    showing.shown()
    async with OpenAIServer() as server:
        server.script(AfterTheFirstRead(completion, read))
        pace = StreamPace(0.0, 3600.0, until=3600.0)
        body = await read_watching(server, pace, showing, read, shows=False)
    assert body == b"".join(completion.chunks())


@dataclass
class TellingDraft(MemoryDraft):
    """A draft that sets `appended` at every append (the server's cue to send the rest)."""

    appended: asyncio.Event = field(default_factory=asyncio.Event)

    async def append(self, text: str) -> None:
        await super().append(text)
        self.appended.set()


async def test_a_rounds_draft_slows_its_stream_through_the_model_and_provider() -> None:
    """The round asks with its draft's `Showing`, the model and provider hand it to the
    transport with the request: the reply showing in the first read (its first words)
    makes the rest come at the later pace (none here), not the first one (an hour)."""
    reply = FakeToolCall("final_reply", {"text": "one two three four"})
    completion, draft = Completion(tool_calls=[reply]), TellingDraft()
    # The role, the call's head and three argument pieces: `{"text": "on` shows "on".
    first = 5
    async with OpenAIServer() as server:
        server.script(AfterTheFirstRead(completion, draft.appended, first=first))
        pace = StreamPace(3600.0, 0.0, until=3600.0)
        transport = ModelTransport(base_url=server.url, stream_pace=pace)
        provider = OpenAIProvider(base_url=server.url, timeout=DEADLINE, transport=transport)
        model = OpenAIModel("gpt-test", provider=provider, stream=True)
        messages = [SystemMessage("Answer."), UserMessage("count to four")]
        try:
            decision = await run_round(model, messages, (FinalReply(),), draft=draft)
        finally:
            await model.aclose()
    assert decision == Reply("one two three four")
    assert draft.visible == "one two three four" and draft.showing.count == 1


def test_the_pool_holds_a_model_request_for_every_worker() -> None:
    """At least httpx's default of 100 connections, and two per worker beyond that."""
    few, many = (
        model_transport("http://127.0.0.1:9", 16),
        model_transport("http://127.0.0.1:9", 300),
    )
    assert isinstance(few, ModelTransport) and isinstance(many, ModelTransport)
    assert few.limits.max_connections == 100
    assert many.limits.max_connections == 600


async def test_closing_a_stream_early_gives_the_connection_back() -> None:
    release = asyncio.Event()
    async with OpenAIServer() as server:
        server.script(Gated(Completion(text="abcdefgh"), release, before=1))
        server.script(JSONReply({"ok": 2}))
        timeout = httpx.Timeout(5.0, pool=1.0)
        async with client(server.url, timeouts=timeout, connections=1) as (http, _):
            async with http.stream("POST", "/chat/completions", json={"stream": True}) as resp:
                async for _ in resp.aiter_raw():
                    break  # the reader gives up after the first chunk
            assert (await http.post("/chat/completions", json={})).json() == {"ok": 2}
        release.set()


async def test_a_cancelled_request_gives_the_connection_back() -> None:
    async with one_connection_in_use(pool_timeout=1.0) as (http, first, _):
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert (await http.post("/chat/completions", json={})).json() == {"ok": 2}


async def test_the_session_is_made_by_the_first_request_and_closed_by_aclose() -> None:
    async with OpenAIServer() as server:
        server.script(JSONReply({"ok": 1}))
        async with client(server.url) as (http, transport):
            assert transport.client is None  # constructing made no session
            await http.post("/chat/completions", json={})
            session = transport.client
            assert session is not None and not session.closed
        assert session.closed


async def test_the_provider_closes_its_session() -> None:
    """A Provider never used needs no closing; one used is closed by `aclose`, twice too."""
    provider("http://127.0.0.1:1/v1")  # dropped unclosed: nothing to warn about
    async with OpenAIServer() as server:
        server.script(JSONReply({"ok": 1}))
        model = provider(server.url)
        await model.post("/chat/completions", {}, ROUTE)
        await model.aclose()
        await model.aclose()
        with pytest.raises(RuntimeError):  # httpx's own answer for a closed client
            await model.post("/chat/completions", {}, ROUTE)


async def test_requests_carry_the_credentials() -> None:
    async with OpenAIServer() as server:
        server.script(JSONReply({"ok": 1}), JSONReply({"ok": 2}))
        model = provider(server.url)
        await model.post("/chat/completions", {"a": 1}, ROUTE)
        await model.post("/chat/completions", {"a": 2}, ROUTE)
        await model.aclose()
    first, second = server.requests
    assert first.headers["authorization"] == f"Bearer {API_KEY}"
    assert first.headers["cf-aig-authorization"] == GATEWAY_TOKEN
    assert [first.body, second.body] == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize("userinfo", ["", "modeluser:base-password@"])
async def test_the_server_sees_the_headers_httpx_own_transport_sends(userinfo: str) -> None:
    """The same request through httpx's own transport and through ours reaches the server
    with the same headers, credentials in the base URL included (httpx makes them a Basic
    `Authorization` header; aiohttp must not see them again in the URL)."""
    async with OpenAIServer() as server:
        server.script(JSONReply({"ok": 1}), JSONReply({"ok": 2}))
        url = server.url.replace("http://", f"http://{userinfo}")
        headers = {"authorization": f"Bearer {API_KEY}", "x-gateway": GATEWAY_TOKEN}
        async with httpx.AsyncClient(base_url=url) as plain, client(url) as (ours, _):
            for http in (plain, ours):
                response = await http.post("/chat/completions", json={"a": 1}, headers=headers)
                assert response.status_code == 200
    theirs, mine = server.requests
    assert mine.headers == theirs.headers and mine.raw == theirs.raw
    if userinfo:
        assert mine.headers["authorization"].startswith("Basic ")


async def test_a_header_that_is_not_http_is_local_protocol_error() -> None:
    """A key with a line break in it is refused before it is sent, as httpx's own transport
    refuses it (`LocalProtocolError`: not transient), and the key is not repeated."""
    async with OpenAIServer() as server, client(server.url) as (http, _):
        headers = {"authorization": f"Bearer {API_KEY}\r\nx-injected: 1"}
        with pytest.raises(httpx.LocalProtocolError) as raised:
            await http.post("/chat/completions", json={}, headers=headers)
    assert server.requests == []
    assert_no_secret(raised.value)


async def test_the_environment_proxy_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """`HTTP_PROXY` is honoured as httpx honoured it: the request goes to the proxy (here the
    fake, on loopback), naming the model's host in its request line."""
    async with OpenAIServer() as proxy:
        proxy.script(JSONReply({"via": "proxy"}))
        monkeypatch.setenv("HTTP_PROXY", proxy.origin)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with client("http://model.invalid/v1") as (http, _):
            response = await http.post("/chat/completions", json={})
    assert response.json() == {"via": "proxy"}
    assert proxy.requests[0].headers["host"] == "model.invalid"


# Never raised to us: the base class, and redirect errors (the transport follows no redirect).
UNRAISED = {aiohttp.ClientError, aiohttp.RedirectClientError}


def test_every_public_aiohttp_error_maps_to_a_specific_httpx_error() -> None:
    public = [getattr(aiohttp, name) for name in aiohttp.__all__]
    errors = [e for e in public if isinstance(e, type) and issubclass(e, aiohttp.ClientError)]
    unmapped = [
        error.__name__
        for error in errors
        if error not in UNRAISED and not any(issubclass(error, a) for a, _, _ in AIOHTTP_ERRORS)
    ]
    assert errors and unmapped == []


def test_no_entry_of_the_error_map_hides_a_later_one() -> None:
    for n, (earlier, _, _) in enumerate(AIOHTTP_ERRORS):
        hidden = [later for later, _, _ in AIOHTTP_ERRORS[n + 1 :] if issubclass(later, earlier)]
        assert hidden == [], f"{earlier.__name__} comes before its subclasses {hidden}"


def test_the_error_message_is_ours_and_keeps_the_os_reason() -> None:
    """aiohttp's message names the URL (which may carry a gateway's account path); ours
    says what happened and, for an OS error, the OS's reason."""
    cause = aiohttp.ServerDisconnectedError("http://user:pw@example.invalid/v1 said no")
    error = httpx_error(cause)
    assert type(error) is httpx.RemoteProtocolError and "example.invalid" not in str(error)
    reset = httpx_error(aiohttp.ClientOSError(104, "Connection reset by peer"))
    assert type(reset) is httpx.ReadError and str(reset).endswith(": Connection reset by peer")


@pytest.mark.parametrize("url", ["http://192.0.2.7/v1", "http://model.example/v1"])
async def test_the_loopback_guard_sees_every_connection_and_lookup(url: str) -> None:
    """aiohttp connects and resolves through the socket module, so the suite's guard stops
    a request beyond loopback — and the error is not mistaken for an unreachable model."""
    async with client(url) as (http, _):
        with pytest.raises(NonLoopbackConnection):
            await http.post("/chat/completions", json={})
