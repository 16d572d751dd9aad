"""Slash commands as Slack sends them, and their `response_url`s as Slack answers them.

A person typing `/threadgate status` makes Slack send the app the command's fields
(docs.slack.dev, "Implementing slash commands"): `token` (deprecated), `team_id`,
`team_domain`, `enterprise_id`/`enterprise_name` on Enterprise Grid, `channel_id`,
`channel_name` (`directmessage` in a DM), `user_id`, `user_name` (deprecated), `command`,
`text`, `api_app_id`, `is_enterprise_install` ("true"/"false"), `response_url`,
`trigger_id`. Over HTTP they come form-encoded to the request URL, signed like events
(`send_command`); over Socket Mode as the `payload` of a `slash_commands` envelope, with
`accepts_response_payload: true` (`deliver_command`). Slack waits 3 s for the ack; the
ack's body (HTTP) or payload (Socket Mode) is the immediate answer, `response_type`
`ephemeral` by default.

`FakeResponseUrls` is the `response_url` side (served by `FakeSlack` under `/commands/`):
a POST of a JSON message (`text` or `blocks`, `response_type`, `replace_original`,
`delete_original`) is recorded in `answers`; Slack allows five uses within thirty minutes
of the command. What it answers past that, or for a body it cannot read, follows the
incoming webhooks' error texts, which Slack's response URLs share — the reference does not
list them for response URLs, so these are our reading: 404 `expired_url` after thirty
minutes, 404 `used_url` past five uses, 400 `invalid_payload` for a body that is not a JSON
object, 400 `no_text` for one with neither `text` nor `blocks`; a success is 200 `ok`.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

from .slack_events import DEFAULT_APP, DEFAULT_CHANNEL, DEFAULT_TEAM, DEFAULT_USER, sign

if TYPE_CHECKING:
    from .socket_mode import FakeSocketMode

USES = 5
LIFETIME_SECONDS = 30 * 60


@dataclass(frozen=True, slots=True)
class Answer:
    """One message posted to a command's response_url."""

    url: str
    body: Mapping[str, Any]
    at: float

    @property
    def text(self) -> str:
        return str(self.body.get("text", ""))

    @property
    def ephemeral(self) -> bool:
        return self.body.get("response_type", "ephemeral") == "ephemeral"


@dataclass
class _Url:
    issued_at: float
    uses: int = 0


@dataclass
class FakeResponseUrls:
    """The response URLs the fake issued, and what was posted to them."""

    clock: Callable[[], float] = time.monotonic
    origin: str = ""
    # Told of each answer (FakeSlack's waiters re-check then).
    notify: Callable[[], Awaitable[None]] | None = None
    answers: list[Answer] = field(default_factory=list)
    _urls: dict[str, _Url] = field(default_factory=dict)

    def issue(self, team: str) -> str:
        """A fresh response_url, as a command's payload carries it."""
        url = f"{self.origin}/commands/{team}/{secrets.randbelow(10**12)}/{secrets.token_hex(12)}"
        self._urls[url] = _Url(self.clock())
        return url

    async def handle(self, request: web.Request) -> web.Response:
        url = f"{self.origin}{request.path}"
        issued = self._urls.get(url)
        if issued is None or self.clock() - issued.issued_at > LIFETIME_SECONDS:
            return web.Response(status=404, text="expired_url")
        if issued.uses >= USES:
            return web.Response(status=404, text="used_url")
        try:
            body = json.loads(await request.text())
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        if not isinstance(body, dict):
            return web.Response(status=400, text="invalid_payload")
        if not body.get("text") and not body.get("blocks") and not body.get("delete_original"):
            return web.Response(status=400, text="no_text")
        issued.uses += 1
        self.answers.append(Answer(url, body, self.clock()))
        if self.notify is not None:
            await self.notify()
        return web.Response(text="ok")


def command_payload(
    text: str = "",
    *,
    command: str = "/threadgate",
    channel: str = DEFAULT_CHANNEL,
    user: str = DEFAULT_USER,
    team: str = DEFAULT_TEAM,
    response_url: str = "https://hooks.slack.com/commands/T1/1/unused",
    trigger_id: str | None = None,
    app_id: str = DEFAULT_APP,
) -> dict[str, str]:
    """The fields Slack sends for `command text` typed by `user` in `channel`."""
    return {
        "token": "verification-token-unused",
        "team_id": team,
        "team_domain": "threadgate-test",
        "channel_id": channel,
        "channel_name": "directmessage" if channel.startswith("D") else "general",
        "user_id": user,
        "user_name": user.lower(),
        "command": command,
        "text": text,
        "api_app_id": app_id,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": trigger_id or new_trigger_id(),
    }


def new_trigger_id() -> str:
    """A trigger id of Slack's shape ("13345224609.738474920.8088930838d88f008e0")."""
    return f"{secrets.randbelow(10**11)}.{secrets.randbelow(10**9)}.{secrets.token_hex(16)}"


async def send_command(
    session: aiohttp.ClientSession, url: str, payload: Mapping[str, str], secret: str
) -> tuple[int, str, str]:
    """POST a command to `url` as Slack does (form-encoded, signed); (status, content
    type, body)."""
    body = urlencode(payload).encode()
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
        **sign(body, secret, int(time.time())),
    }
    async with session.post(url, data=body, headers=headers) as response:
        return response.status, response.content_type, await response.text()


async def deliver_command(
    sockets: FakeSocketMode,
    payload: Mapping[str, str],
    *,
    envelope_id: str | None = None,
    retry_attempt: int = 0,
    retry_reason: str = "",
) -> str:
    """Push a `slash_commands` envelope to the newest open connection; its envelope id.
    The same `envelope_id` again is a redelivery."""
    links = sockets.open_links
    if not links:
        raise AssertionError(f"FakeSocketMode: no open connection.\n{sockets.describe()}")
    envelope_id = envelope_id or secrets.token_hex(12)
    await links[-1].ws.send_json(
        {
            "envelope_id": envelope_id,
            "type": "slash_commands",
            "payload": dict(payload),
            "accepts_response_payload": True,
            "retry_attempt": retry_attempt,
            "retry_reason": retry_reason,
        }
    )
    return envelope_id
