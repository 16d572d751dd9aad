"""Where the bot token goes when a file is downloaded, and which URLs are refused.

Two loopback servers stand for Slack's file host (127.0.0.1) and another host
(127.0.0.2, a CDN or an attacker's server); each records the Authorization headers it
was shown.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import httpx
import pytest
from aiohttp import web

from gateway.inbound.attachments import FileReader
from gateway.inbound.decoders import Decoders
from gateway.inbound.files import (
    DOWNLOAD_FAILED,
    NOT_FROM_SLACK,
    OUT_OF_TIME,
    FileDownloader,
    NotRead,
)
from gateway.slack.events import SharedFile

TOKEN = "xoxb-download-test"


@dataclass
class Host:
    """A file host on one loopback address: routes answer by path."""

    address: str
    seen: list[str | None] = field(default_factory=list)
    # A response object answers once: each route makes a fresh one.
    routes: dict[str, Callable[[], web.Response]] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    origin: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(request.headers.get("Authorization"))
        if request.path == "/hang":
            await self.release.wait()
        make = self.routes.get(request.path)
        return make() if make else web.Response(status=404)


async def serve(host: Host) -> web.AppRunner:
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", host.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, host.address, 0)
    await site.start()
    host.origin = f"http://{host.address}:{runner.addresses[0][1]}"
    return runner


@pytest.fixture
async def hosts() -> AsyncIterator[tuple[Host, Host]]:
    slack, other = Host("127.0.0.1"), Host("127.0.0.2")
    runners = [await serve(slack), await serve(other)]
    yield slack, other
    slack.release.set()
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def downloader(hosts: tuple[Host, Host]) -> AsyncIterator[FileDownloader]:
    """A downloader whose SLACK_API_URL is the first host's, as the fake Slack's is."""
    async with httpx.AsyncClient() as client:
        yield FileDownloader(client, max_bytes=1000, api_url=f"{hosts[0].origin}/api/")


def deadline(seconds: float = 5.0) -> float:
    return asyncio.get_running_loop().time() + seconds


def redirect(to: str) -> Callable[[], web.Response]:
    return lambda: web.Response(status=302, headers={"Location": to})


def body(data: bytes) -> Callable[[], web.Response]:
    return lambda: web.Response(body=data)


async def test_a_redirect_on_the_same_host_keeps_the_token(
    hosts: tuple[Host, Host], downloader: FileDownloader
) -> None:
    """Slack's own redirect (same host): the token goes along; the bytes come back."""
    slack, _ = hosts
    slack.routes = {"/a": redirect("/b"), "/b": body(b"hello")}
    data = await downloader.download(
        f"{slack.origin}/a", TOKEN, declared_size=5, deadline=deadline()
    )
    assert data == b"hello" and slack.seen == [f"Bearer {TOKEN}"] * 2


async def test_a_redirect_to_another_host_does_not_carry_the_token(
    hosts: tuple[Host, Host], downloader: FileDownloader
) -> None:
    """Off the event's host, the request goes without the Authorization header."""
    slack, other = hosts
    other.routes = {"/f": body(b"cdn bytes")}
    slack.routes = {"/a": redirect(f"{other.origin}/f")}
    data = await downloader.download(
        f"{slack.origin}/a", TOKEN, declared_size=None, deadline=deadline()
    )
    assert data == b"cdn bytes" and other.seen == [None]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://files.slack.com/files-pri/T1-F1/a.txt", DOWNLOAD_FAILED),  # not https
        ("https://evil.example/files-pri/T1-F1/a.txt", NOT_FROM_SLACK),
        ("https://files.slack.com.evil.example/a.txt", NOT_FROM_SLACK),
        ("ftp://files.slack.com/a.txt", DOWNLOAD_FAILED),
    ],
)
async def test_urls_that_are_not_slack_over_https_are_refused(
    url: str, reason: str, downloader: FileDownloader
) -> None:
    """Plain http off loopback, or a host that is not Slack's: refused before any request."""
    with pytest.raises(NotRead, match=reason):
        await downloader.download(url, TOKEN, declared_size=None, deadline=deadline())


async def test_plain_http_elsewhere_on_loopback_never_sees_the_token(
    hosts: tuple[Host, Host], downloader: FileDownloader
) -> None:
    """Only SLACK_API_URL's own origin is trusted over plain http: another loopback
    address, or another port of the same one, is refused before any request."""
    slack, other = hosts
    other.routes = {"/f": body(b"bytes")}
    port = int(slack.origin.rsplit(":", 1)[1])
    for url in (f"{other.origin}/f", f"http://127.0.0.1:{port + 1 if port < 65535 else 1}/f"):
        with pytest.raises(NotRead, match=NOT_FROM_SLACK):
            await downloader.download(url, TOKEN, declared_size=None, deadline=deadline())
    assert other.seen == [] and slack.seen == []


async def test_the_token_goes_over_https_to_slacks_file_host() -> None:
    """https://files.slack.com gets the token; its http twin is refused unasked."""
    seen: list[tuple[str, str | None]] = []

    def slack_files(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers.get("Authorization")))
        return httpx.Response(200, content=b"bytes", headers={"Content-Type": "text/plain"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(slack_files)) as client:
        downloads = FileDownloader(client, max_bytes=1000, api_url="https://slack.com/api/")
        url = "https://files.slack.com/files-pri/T1-F1/a.txt"
        assert await downloads.download(url, TOKEN, declared_size=5, deadline=deadline()) == (
            b"bytes"
        )
        with pytest.raises(NotRead, match=DOWNLOAD_FAILED):
            await downloads.download(
                url.replace("https", "http"), TOKEN, declared_size=5, deadline=deadline()
            )
    assert seen == [(url, f"Bearer {TOKEN}")]


async def test_a_redirect_loop_fails(hosts: tuple[Host, Host], downloader: FileDownloader) -> None:
    """A few redirects at most."""
    slack, _ = hosts
    slack.routes = {"/a": redirect("/a")}
    with pytest.raises(NotRead, match=DOWNLOAD_FAILED):
        await downloader.download(
            f"{slack.origin}/a", TOKEN, declared_size=None, deadline=deadline()
        )
    assert len(slack.seen) == 4


async def test_a_redirect_to_plain_http_elsewhere_is_refused(
    hosts: tuple[Host, Host], downloader: FileDownloader
) -> None:
    """A redirect to a non-loopback http URL is not followed."""
    slack, _ = hosts
    slack.routes = {"/a": redirect("http://files.example.com/x")}
    with pytest.raises(NotRead, match=DOWNLOAD_FAILED):
        await downloader.download(
            f"{slack.origin}/a", TOKEN, declared_size=None, deadline=deadline()
        )


async def test_a_download_past_the_deadline_is_not_read_in_time(
    hosts: tuple[Host, Host], downloader: FileDownloader
) -> None:
    """The host never answers: at the deadline the file is given up."""
    slack, _ = hosts
    with pytest.raises(NotRead, match=OUT_OF_TIME):
        await downloader.download(
            f"{slack.origin}/hang", TOKEN, declared_size=None, deadline=deadline(0.2)
        )


async def test_an_error_status_or_a_content_length_over_the_cap_is_not_content(
    hosts: tuple[Host, Host], downloader: FileDownloader
) -> None:
    """A 404 is a failed download; a Content-Length over the cap is too large."""
    slack, _ = hosts
    slack.routes = {"/big": body(b"x" * 2000)}
    with pytest.raises(NotRead, match=DOWNLOAD_FAILED):
        await downloader.download(
            f"{slack.origin}/none", TOKEN, declared_size=None, deadline=deadline()
        )
    with pytest.raises(NotRead, match="too large"):
        await downloader.download(
            f"{slack.origin}/big", TOKEN, declared_size=None, deadline=deadline()
        )


async def test_an_unexpected_failure_is_a_failed_download_and_is_counted() -> None:
    """Whatever goes wrong while reading a file, the message keeps its answer: the file
    is 'download failed', and the reader's counter hears it."""

    def explode(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("something nobody expected")

    counted: list[tuple[str, str]] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(explode)) as client:
        reader = FileReader(
            FileDownloader(client, max_bytes=1000, api_url="https://slack.com/api/"),
            Decoders(processes=1, memory_bytes=256 * 2**20),  # a text file starts none
            TOKEN,
            frozenset({"text"}),
            on_read=lambda kind, outcome: counted.append((kind, outcome)),
        )
        shared = SharedFile("a.txt", "text/plain", 4, "https://files.slack.com/a", "text/plain")
        (content,) = await reader.read([shared], deadline())
    assert content.problem == DOWNLOAD_FAILED and counted == [("text", "download_failed")]
