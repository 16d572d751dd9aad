"""Slack's file hosting, for the fake Slack: `url_private` downloads with the bot token.

`FakeSlack.files` is a `FakeFiles`; its handler is registered on the fake's server, so a
file's `url_private` is `http://127.0.0.1:PORT/files-pri/T1-F…/name` (plain http, which
the gateway sends the token to only because it is SLACK_API_URL's own origin)::

    file = slack.files.add_file("shot.png", png_bytes, mimetype="image/png", filetype="png")
    await rig.send(event_callback(file_share_event(files=[file])))
    assert slack.files.gets(file["id"]) == 1

`files.info` answers with the file object a message would carry (`add_file(…,
by_id=True)` returns the partial object instead, `file_access: check_file_info`).

Like Slack: the right bearer token gets the bytes (`Content-Type` the file's mimetype,
`Content-Length` its length); no token or another one gets HTTP 200 with an HTML login
page. The body is written in chunks and `sent(file_id)` counts the bytes written before
the client went away, so a test can tell a client that stopped at its cap from one that
read everything. `size` in the file object is what Slack *says*: a test may make it lie.
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .slack_events import DEFAULT_USER, slack_file

LOGIN_PAGE = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in</body></html>"
CHUNK = 64 * 1024


@dataclass
class HostedFile:
    id: str
    name: str
    content: bytes
    mimetype: str
    content_length: bool = True


class FakeFiles:
    """The files the fake Slack hosts, and a record of their downloads."""

    def __init__(self, bot_token: str, team_id: str) -> None:
        self.bot_token = bot_token
        self.team_id = team_id
        self.origin = ""  # set by FakeSlack once it listens
        self._files: dict[str, HostedFile] = {}
        self._entries: dict[str, dict[str, Any]] = {}  # what files.info answers
        self._infos: Counter[str] = Counter()
        self._gets: Counter[str] = Counter()
        self._refused: Counter[str] = Counter()
        self._sent: Counter[str] = Counter()

    def add_file(
        self,
        name: str,
        content: bytes,
        *,
        mimetype: str = "text/plain",
        filetype: str = "text",
        size: int | None = None,
        user: str = DEFAULT_USER,
        download_url: bool = True,
        content_length: bool = True,
        by_id: bool = False,
    ) -> dict[str, Any]:
        """Host `content` and return the file object Slack puts in a message's `files`
        (`size` defaults to the real length; `content_length=False` sends the body
        chunked, without saying its length; `by_id=True`: the partial object Slack gives
        in some channels, such as Slack Connect's, whose file only `files.info` describes)."""
        declared = len(content) if size is None else size
        entry = slack_file(
            name=name, mimetype=mimetype, filetype=filetype, size=declared, user=user
        )
        file_id = entry["id"]
        self._files[file_id] = HostedFile(file_id, name, content, mimetype, content_length)
        entry["url_private"] = f"{self.origin}/files-pri/{self.team_id}-{file_id}/{name}"
        entry["url_private_download"] = f"{entry['url_private']}?download=1"
        if not download_url:
            del entry["url_private_download"]
        self._entries[file_id] = entry
        if by_id:
            return partial_file(file_id)
        return entry

    def info(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """`files.info`: the file object, as for a file of a message, with its comments
        (none) and a cursor; `file_not_found` for an id it does not host."""
        file_id = str(params.get("file", ""))
        entry = self._entries.get(file_id)
        if entry is None:
            return {"ok": False, "error": "file_not_found"}
        self._infos[file_id] += 1
        return {
            "ok": True,
            "file": entry,
            "comments": [],
            "response_metadata": {"next_cursor": ""},
        }

    def infos(self, file_id: str) -> int:
        """`files.info` calls that described the file."""
        return self._infos[file_id]

    def gets(self, file_id: str) -> int:
        """Downloads of the file with the right token."""
        return self._gets[file_id]

    def refused(self, file_id: str) -> int:
        """Requests for the file answered with the login page."""
        return self._refused[file_id]

    def sent(self, file_id: str) -> int:
        """Bytes of the file written to clients before they stopped reading."""
        return self._sent[file_id]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """GET /files-pri/{team}-{file id}/{name}."""
        team_file = request.match_info["path"].split("/", 1)[0]
        hosted = self._files.get(team_file.removeprefix(f"{self.team_id}-"))
        if hosted is None:
            return web.Response(status=404, text="file not found")
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            self._refused[hosted.id] += 1
            return web.Response(body=LOGIN_PAGE, content_type="text/html")
        self._gets[hosted.id] += 1
        headers = {"Content-Type": hosted.mimetype}
        if hosted.content_length:
            headers["Content-Length"] = str(len(hosted.content))
        response = web.StreamResponse(headers=headers)
        _small_send_buffer(request)
        await response.prepare(request)
        try:
            for start in range(0, len(hosted.content), CHUNK):
                chunk = hosted.content[start : start + CHUNK]
                await response.write(chunk)
                self._sent[hosted.id] += len(chunk)
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client stopped reading: what it got is counted
        return response


def partial_file(file_id: str) -> dict[str, Any]:
    """What a message's `files` holds for a file Slack gives only by id."""
    return {
        "id": file_id,
        "mode": "file_access",
        "file_access": "check_file_info",
        "created": 0,
        "timestamp": 0,
        "user": "",
    }


def _small_send_buffer(request: web.Request) -> None:
    """Keep the kernel from taking megabytes of the body ahead of the client (its send
    buffer grows to 4 MB on loopback), so `sent` is close to what the client read."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHUNK)
