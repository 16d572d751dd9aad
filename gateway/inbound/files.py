"""Downloading the files people attach to messages: with the bot token, within a cap.

Slack serves a message's files from `url_private` (or `url_private_download`) to a client
that shows the bot token (scope `files:read`). This module fetches those bytes and
nothing else; what the model gets from them is `gateway.inbound.attachments`' job.

Where it sits: in the gatekeeper, before admission, inside the pre-ack look-up budget
(`Gatekeeper`'s deadline), all files of one message at once. The bytes must be read
while the event is in hand — the turn stored at admission is what every round reads,
and it stores images and extracted text, never a URL to come back to. The ack rule holds:
the event is acked once the turn (with what was read) is committed; a download not done
by the deadline is described as not read, with that reason, and never holds the ack past
the budget.

What it refuses, and why:
- the token goes only over https to Slack's own hosts (`*.slack.com`, `*.slack-gov.com`),
  or to the origin SLACK_API_URL names (its scheme, host and port exactly): an external
  file's URL points at someone else's server. The second is how a test double or an
  egress proxy gets the files: the operator already trusts that origin with the token on
  every Web API call, and SLACK_API_URL itself must be https or plain http to a loopback
  address (gateway/slack/client.py). So the fake Slack's plain-http files on 127.0.0.1
  are fetched with the token, and no other plain-http URL ever sees it — not another port
  or address on loopback (some other local service), not Slack's hosts over http;
- a hop without the token (a redirect elsewhere) must be https, or plain http to a
  loopback address;
- a redirect is followed with the token only to the origin the event named; elsewhere
  (a CDN) without it, and never more than a few times;
- Slack's login page (HTTP 200, `text/html`: the token is missing, wrong or lacks
  `files:read`) is a failed download, not content;
- a body longer than `max_bytes` is cut off at the cap: the declared size is checked
  first, then Content-Length, then the bytes as they stream in; the stream is closed as
  soon as the cap is passed, so at most about the cap is ever read.
"""

from __future__ import annotations

import asyncio
import ipaddress
from urllib.parse import urljoin, urlsplit

import httpx

from gateway.inbound.reasons import (
    DOWNLOAD_FAILED,
    NOT_FROM_SLACK,
    OUT_OF_TIME,
    TOO_LARGE,
    NotRead,
)

# Where the bot token may go. Slack's files live on files.slack.com (and the workspace's
# own subdomains for some plans); GovSlack's on slack-gov.com.
_SLACK_DOMAINS = ("slack.com", "slack-gov.com")
_DEFAULT_PORTS = {"https": 443, "http": 80}
Origin = tuple[str, str, int | None]
# Slack's file URLs redirect at most once in practice; more is a loop or a trick.
_MAX_REDIRECTS = 3
# Files of one message are fetched at once; this many at a time across the process.
_CONCURRENT_DOWNLOADS = 8


class FileDownloader:
    """Fetches Slack files with a bot token (each workspace has its own); one per process,
    so `_CONCURRENT_DOWNLOADS` holds across workspaces."""

    def __init__(self, client: httpx.AsyncClient, *, max_bytes: int, api_url: str) -> None:
        self._client = client
        self._max_bytes = max_bytes
        self._api_origin = _origin(api_url)  # SLACK_API_URL's: trusted with the token
        self._slots = asyncio.Semaphore(_CONCURRENT_DOWNLOADS)

    async def download(
        self, url: str, token: str, *, declared_size: int | None, deadline: float
    ) -> bytes:
        """The file's bytes, or `NotRead` saying why not (by `deadline`, event-loop time)."""
        if declared_size is not None and declared_size > self._max_bytes:
            raise NotRead(TOO_LARGE)
        origin = self._token_origin(url)
        try:
            async with asyncio.timeout_at(deadline), self._slots:
                return await self._follow(url, origin, token)
        except TimeoutError:
            raise NotRead(OUT_OF_TIME) from None
        except (httpx.HTTPError, OSError) as exc:
            raise NotRead(DOWNLOAD_FAILED) from exc

    def _token_origin(self, url: str) -> Origin:
        """The origin the token may be shown to: the event's own, if it is Slack's over
        https or SLACK_API_URL's (see the module docstring)."""
        origin = _origin(url)
        if origin == self._api_origin:
            return origin
        scheme, host, _ = origin
        if not any(_within(host, domain) for domain in _SLACK_DOMAINS):
            raise NotRead(NOT_FROM_SLACK)
        if scheme != "https":
            raise NotRead(DOWNLOAD_FAILED)  # Slack's host, but not over https
        return origin

    async def _follow(self, url: str, token_origin: Origin, token: str) -> bytes:
        for _ in range(_MAX_REDIRECTS + 1):
            same_origin = _origin(url) == token_origin
            if not same_origin:
                _check_scheme(url)
            headers = {"Authorization": f"Bearer {token}"} if same_origin else {}
            async with self._client.stream("GET", url, headers=headers) as response:
                if response.is_redirect and "location" in response.headers:
                    url = urljoin(url, response.headers["location"])
                    continue
                return await self._body(response)
        raise NotRead(DOWNLOAD_FAILED)

    async def _body(self, response: httpx.Response) -> bytes:
        content_type = response.headers.get("content-type", "").lower()
        if response.status_code != 200 or content_type.startswith("text/html"):
            raise NotRead(DOWNLOAD_FAILED)  # an error, or Slack's login page
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self._max_bytes:
            raise NotRead(TOO_LARGE)
        chunks: list[bytes] = []
        received = 0
        async for chunk in response.aiter_bytes():
            received += len(chunk)
            if received > self._max_bytes:
                raise NotRead(TOO_LARGE)  # leaving the block closes the stream
            chunks.append(chunk)
        return b"".join(chunks)


def _origin(url: str) -> Origin:
    """Scheme, host and port, as a browser compares origins (the default port filled in);
    a URL without a host has none that can be trusted."""
    parts = urlsplit(url)
    try:
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        port = None
    if not parts.hostname:
        raise NotRead(DOWNLOAD_FAILED)
    return parts.scheme.lower(), parts.hostname, port


def _check_scheme(url: str) -> None:
    parts = urlsplit(url)
    plain_loopback = parts.scheme == "http" and _is_loopback(parts.hostname or "")
    if not (parts.scheme == "https" or plain_loopback) or not parts.hostname:
        raise NotRead(DOWNLOAD_FAILED)


def _within(host: str, domain: str) -> bool:
    return host == domain or host.endswith(f".{domain}")


def _is_loopback(host: str) -> bool:
    """A loopback IP literal (127.0.0.1, ::1): the tests' fakes, never a name to resolve."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
