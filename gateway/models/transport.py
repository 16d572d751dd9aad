"""The model providers' httpx transport: requests go over one aiohttp `ClientSession`.

It is the gateway's, given to the providers through `ProviderSettings.transport`: agent/
speaks HTTP through httpx alone and does not import aiohttp, the gateway's HTTP library.

Why: httpx's default transport (httpcore over anyio and h11) was a large share of the
gateway's CPU (bench/cpu.py's profile; the figures are in BENCHMARKS.md), charged per
request and per streamed chunk. aiohttp, already our dependency for the Slack side, parses
HTTP in C. We keep httpx's API above the transport — `httpx.Response`, `aiter_text`,
httpx-sse's `EventSource`, and httpx exception types, which `classify.py` and its messages
are written against.

Why built on `httpx_aiohttp.AiohttpTransport` (the transport the OpenAI SDK offers for
speed) rather than written from scratch: it already translates a request (headers, body,
timeouts, proxy, TLS context) and wraps aiohttp's response as an httpx byte stream. What
it gets wrong for us is corrected here, and nothing more:

- Its exception map turns every `aiohttp.ClientConnectionError` into `httpx.ConnectTimeout`
  (a refused connection, a server that hung up mid-stream). We map each error again from
  its aiohttp cause (`AIOHTTP_ERRORS`), so the type our messages name stays truthful: refused
  is `ConnectError`, a body cut short `RemoteProtocolError`, a read timeout `ReadTimeout`.
  Messages are ours, fixed per kind, so nothing of a request (URL, headers) is repeated.
- aiohttp's `connect` timeout counts waiting for a free connection and connecting as one,
  so a pool timeout could not be told from a connect timeout. The pool limit is therefore
  ours (a semaphore held from request to response close, `PoolTimeout` after httpx's
  `pool` timeout); aiohttp's connector is unlimited and its `sock_connect` is httpx's
  `connect`, `sock_read` httpx's `read`. aiohttp has no write timeout (request bodies are
  small, and `HTTPModel.request`'s whole-request deadline still bounds everything).
- The session is made on the first request, inside the running loop, never at
  construction: a Provider a test never uses leaves nothing to warn about, and `aclose`
  (through `httpx.AsyncClient.aclose`) closes the session it did make.
- The environment's proxy (`HTTPS_PROXY`/`HTTP_PROXY`, `NO_PROXY`), which httpx honoured
  by itself, is looked up once for the provider's base URL. The session does not
  `trust_env`: that would look the proxy and `.netrc` up again on a thread per request.
- Cookies are httpx's to keep (the session gets a `DummyCookieJar`), so none is sent twice.
- Credentials in the base URL are sent as httpx sends them (its Basic header), never again
  in the URL, which aiohttp would refuse; a header aiohttp will not send (a key with a line
  break) is `LocalProtocolError`, as with httpx's own transport.

Three choices are ours, two of them for streams:

- **An event stream is read at a pace** (`StreamPace`): at most every 50 ms for its first
  half second, then every 250 ms. A model sends an SSE event every few characters, and
  each one would wake the whole reading pipeline (httpx's decoders, the framing, the
  provider's reader, the task), where a read at a pace wakes it once for everything that
  came meanwhile (bench/first_text.py's profile). Between reads the socket itself is not
  read (aiohttp's protocol is paused, as its own flow control does): the kernel keeps
  what arrives, and the next read takes all of it at once, where aiohttp would otherwise
  wake for every event the model sent. The first words of a reply show within 50 ms of
  arriving; later ones within 250 ms (Slack is appended at most once a second anyway), and
  the end of a longer answer is seen up to 250 ms late. A read that fills httpx_aiohttp's
  whole read size is not followed by a pause: the stream comes faster than its pace, and
  pausing would only throttle it.
- **Once the reply shows, the stream slows at once** (`agent.core.ports.Showing`): reading
  every 50 ms is only for the first words, and once they are in the thread nothing more
  shows before the next append, a second later. The round asks the model with its
  draft's `Showing`, which the draft counts up each time it starts to show; the provider
  sends it with the request (the `SHOWING` request extension), and the stream reads every
  250 ms once the count passes what it was at the request. Without one (a compaction's
  summary, a test), the half second holds.
- **The pool holds as many connections as the process may hold model requests**: at least
  httpx's default of 100, and twice `THREADGATE_WORKERS` when that is more (a worker holds
  one model request at a time; compaction's summaries come on top). With more workers
  than connections, a stream waited for another to end before its first token.

What these choices saved, measured, is in BENCHMARKS.md.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import aiohttp
import httpx
from aiohttp.helpers import get_env_proxy_for_url
from httpx_aiohttp import AiohttpTransport
from httpx_aiohttp.transport import AiohttpResponseStream
from yarl import URL

from agent import SHOWING, Showing
from gateway.models.tls import verified_tls

# httpx's own defaults, which the provider's client had before this transport.
DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)


@dataclass(frozen=True, slots=True)
class StreamPace:
    """How often an event stream is read (module docstring): every `first` seconds until
    `until` seconds after its first read, every `later` seconds after that."""

    first: float = 0.05
    later: float = 0.25
    until: float = 0.5

    def pause(self, since_first_read: float, shown: bool = False) -> float:
        """The seconds to wait before the next read; `shown`: the reply shows already."""
        return self.first if since_first_read < self.until and not shown else self.later


STREAM_PACE = StreamPace()


def model_transport(base_url: str, workers: int = 0) -> httpx.AsyncBaseTransport:
    """The transport for a provider at `base_url` (`ProviderSettings.transport`), for a
    process running `workers` tasks at once."""
    most = max(DEFAULT_LIMITS.max_connections or 0, 2 * workers)
    limits = httpx.Limits(max_connections=most, max_keepalive_connections=most)
    return ModelTransport(base_url=base_url, limits=limits, stream_pace=STREAM_PACE)


class ModelTransport(AiohttpTransport):
    """An httpx transport over one lazily made aiohttp session, for one provider."""

    def __init__(
        self,
        *,
        base_url: str,
        limits: httpx.Limits = DEFAULT_LIMITS,
        stream_pace: StreamPace | None = None,
    ) -> None:
        super().__init__(verify=verified_tls(), limits=limits, proxy=_env_proxy(base_url))
        slots = limits.max_connections
        self._slots = asyncio.Semaphore(slots) if slots is not None else None
        self._stream_pace = stream_pace

    def get_client(self) -> aiohttp.ClientSession:
        """The session, made on the first request (called by `handle_async_request`)."""
        connector = aiohttp.TCPConnector(
            limit=0,  # the pool limit is `_slots`, so a pool timeout can be told apart
            keepalive_timeout=self.limits.keepalive_expiry,
            ssl=self.ssl_context,
        )
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        await self._acquire(timeouts.get("pool"))
        release = _once(self._release)
        try:
            # What aiohttp is given; the caller's request (httpx logs its URL) is left alone.
            sent = copy.copy(request)
            # The pool wait is over; aiohttp's `connect` (pool wait + connect) is not wanted.
            sent.extensions = {**request.extensions, "timeout": {**timeouts, "pool": None}}
            if request.url.userinfo:
                # httpx has made the URL's credentials a Basic `Authorization` header already
                # (httpcore never sends them); aiohttp would refuse a URL with credentials
                # beside that header, so it gets the URL without them.
                sent.url = request.url.copy_with(userinfo=b"")
            with _remapped():
                response = await super().handle_async_request(sent)
        except BaseException:
            release()  # a failed or cancelled request: aiohttp closed its connection
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)  # httpx_aiohttp's stream
        events = response.headers.get("content-type", "").startswith("text/event-stream")
        pace = self._stream_pace if events else None
        response.stream = _ReleasingStream(
            response.stream, release, pace, _aiohttp_response(response), _showing(request)
        )
        return response

    async def _acquire(self, seconds: float | None) -> None:
        slots = self._slots
        if slots is None:
            return
        if not slots.locked() or seconds is None:
            await slots.acquire()  # a free slot is taken without suspending
            return
        try:
            async with asyncio.timeout(seconds):
                await slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout(
                f"no connection free within {seconds:g} s "
                f"(all {self.limits.max_connections} in use)"
            ) from None

    def _release(self) -> None:
        if self._slots is not None:
            self._slots.release()


class _ReleasingStream(httpx.AsyncByteStream):
    """The response body: errors mapped like the request's, the pool slot given back when
    httpx closes the response (read to the end, or closed early), and with a `pace`, a
    pause after each chunk with the socket not read, so that the next read takes
    everything that came meanwhile."""

    def __init__(
        self,
        inner: httpx.AsyncByteStream,
        release: Callable[[], None],
        pace: StreamPace | None = None,
        source: aiohttp.ClientResponse | None = None,
        showing: Showing | None = None,
    ) -> None:
        self._inner = inner
        self._release = release
        self._pace = pace
        self._source = source
        self._showing = showing
        self._shown_before = showing.count if showing is not None else 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        first_read: float | None = None
        with _remapped():
            async for chunk in self._inner:
                yield chunk
                # A whole read's worth came: the stream is flowing faster than its pace
                # (a long answer, a fast model), and waiting would only throttle it.
                if self._pace is not None and len(chunk) < AiohttpResponseStream.CHUNK_SIZE:
                    now = time.monotonic()
                    first_read = now if first_read is None else first_read
                    showing = self._showing
                    shown = showing is not None and showing.count > self._shown_before
                    await self._unread(self._pace.pause(now - first_read, shown))

    async def _unread(self, seconds: float) -> None:
        """Wait `seconds` without reading the socket: what arrives meanwhile stays in the
        kernel's buffer. aiohttp's protocol pauses and resumes as its own flow control does
        (its read timeout stops meanwhile); a transport already paused by it is left so. A
        body that has all arrived is read on at once."""
        source = self._source
        if source is not None and source.content.is_eof():
            return
        connection = source.connection if source is not None else None
        protocol = connection.protocol if connection is not None else None
        transport = protocol.transport if protocol is not None else None
        if protocol is None or transport is None or not transport.is_reading():
            await asyncio.sleep(seconds)
            return
        protocol.pause_reading()
        try:
            await asyncio.sleep(seconds)
        finally:
            if protocol.transport is not None:  # not closed meanwhile
                protocol.resume_reading()

    async def aclose(self) -> None:
        # aiohttp keeps the connection only if the body was read to its end; a response
        # closed early (a cancelled stream) closes its connection instead of reusing it.
        try:
            with _remapped():
                await self._inner.aclose()
        finally:
            self._release()


def _showing(request: httpx.Request) -> Showing | None:
    """The `Showing` the request came with (`SHOWING`), if any."""
    showing = request.extensions.get(SHOWING)
    return showing if isinstance(showing, Showing) else None


def _aiohttp_response(response: httpx.Response) -> aiohttp.ClientResponse | None:
    """aiohttp's response behind `response`, whose connection a paced stream pauses.
    httpx_aiohttp keeps it in its stream, under a private name: without it (another
    version), streams are still paced, only their sockets are read meanwhile."""
    source = getattr(response.stream, "_aiohttp_response", None)
    return source if isinstance(source, aiohttp.ClientResponse) else None


def _once(action: Callable[[], None]) -> Callable[[], None]:
    done = False

    def run() -> None:
        nonlocal done
        if not done:
            done = True
            action()

    return run


@contextmanager
def _remapped() -> Iterator[None]:
    """Re-raise an httpx error from `httpx_aiohttp` (or an aiohttp error it let through)
    as the httpx type its aiohttp cause stands for, and a refused header as httpx would."""
    try:
        yield
    except httpx.TransportError as exc:
        cause = exc.__cause__
        if not isinstance(cause, aiohttp.ClientError):
            raise
        raise httpx_error(cause) from cause
    except aiohttp.ClientError as exc:
        raise httpx_error(exc) from exc
    except ValueError as exc:
        # aiohttp refuses to send a header with a control character (a key with a line
        # break in it) where httpx's own transport raises `LocalProtocolError`; neither
        # message is repeated, as both quote the header's value.
        raise httpx.LocalProtocolError("a request header is not valid HTTP") from exc


# Each aiohttp failure and the httpx exception httpx's own transport raises for the same
# failure, with what happened in our words (aiohttp's messages name the URL). Most specific
# class first, because the aiohttp classes inherit from one another; a test checks that no
# entry hides a later one and that every public aiohttp error lands on a specific type.
AIOHTTP_ERRORS: tuple[tuple[type[aiohttp.ClientError], type[httpx.TransportError], str], ...] = (
    (aiohttp.ClientProxyConnectionError, httpx.ProxyError, "could not connect to the proxy"),
    (aiohttp.ClientHttpProxyError, httpx.ProxyError, "the proxy refused the request"),
    (aiohttp.ClientConnectorError, httpx.ConnectError, "could not connect"),
    (aiohttp.ServerFingerprintMismatch, httpx.ConnectError, "the TLS certificate did not match"),
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout, "timed out connecting"),
    (aiohttp.SocketTimeoutError, httpx.ReadTimeout, "timed out waiting for the server's data"),
    (aiohttp.ServerTimeoutError, httpx.ReadTimeout, "timed out waiting for the server"),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError, "the server hung up early"),
    (aiohttp.ClientPayloadError, httpx.RemoteProtocolError, "the response body was cut short"),
    (aiohttp.UploadAbortedError, httpx.WriteError, "the request body was not fully sent"),
    (aiohttp.ClientConnectionResetError, httpx.WriteError, "the connection closed mid-send"),
    (aiohttp.ClientOSError, httpx.ReadError, "the connection failed"),
    (aiohttp.ClientConnectionError, httpx.ReadError, "the connection failed"),
    (aiohttp.InvalidURL, httpx.UnsupportedProtocol, "not a URL aiohttp can call"),
    (aiohttp.NonHttpUrlClientError, httpx.UnsupportedProtocol, "not an http(s) URL"),
    (aiohttp.ClientResponseError, httpx.RemoteProtocolError, "a malformed HTTP response"),
)


def httpx_error(cause: aiohttp.ClientError) -> httpx.TransportError:
    """The httpx exception for an aiohttp failure."""
    for aiohttp_type, httpx_type, what in AIOHTTP_ERRORS:
        if isinstance(cause, aiohttp_type):
            # The OS's reason (connection refused, a DNS or TLS failure) helps an operator
            # and holds no secret: it names at most an address.
            reason = f": {cause.strerror}" if isinstance(cause, OSError) and cause.strerror else ""
            return httpx_type(what + reason)
    return httpx.TransportError(f"the request failed ({type(cause).__name__})")


def _env_proxy(base_url: str) -> httpx.Proxy | None:
    """The proxy the environment sets for `base_url`, as httpx would have used it."""
    try:
        proxy, auth = get_env_proxy_for_url(URL(base_url))
    except LookupError:
        return None
    credentials = (auth.login, auth.password) if auth is not None else None
    return httpx.Proxy(str(proxy), auth=credentials)
