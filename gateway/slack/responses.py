"""Answering a slash command later, through its `response_url`.

A command's answer normally rides on its ack (the HTTP 200's body, or the Socket Mode
ack's payload): Slack shows it to the person alone (`response_type: ephemeral`). When the
answer is not ready within the ack's budget, the ack says so and the answer follows to the
command's `response_url` — Slack's reference: a POST of the same JSON, at most five times
within thirty minutes of the command.

The URL comes in the payload, which is signed (HTTP) or came over our own WebSocket, but a
POST to wherever a payload points is still a request on the payload's behalf: it is made
only to Slack's `hooks.slack.com` over https, or to the host of `SLACK_API_URL` (an egress
proxy, a test double), and never carries a token.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import aiohttp

log = logging.getLogger(__name__)

SLACK_HOOKS = "hooks.slack.com"
_TIMEOUT = aiohttp.ClientTimeout(total=10)


def may_post_to(url: str, api_url: str) -> bool:
    """Whether a response_url is Slack's (or on SLACK_API_URL's host)."""
    target, api = urlsplit(url), urlsplit(api_url)
    if target.scheme == "https" and target.hostname == SLACK_HOOKS and not target.port:
        return True
    return bool(target.netloc) and (target.scheme, target.netloc) == (api.scheme, api.netloc)


async def post_response(url: str, text: str, *, api_url: str) -> bool:
    """Post `text` as an ephemeral answer to `url`; whether Slack took it (a failure is
    logged, never raised: the person asked again is the remedy)."""
    if not may_post_to(url, api_url):
        log.warning("a command's response_url is not Slack's; its answer was not posted")
        return False
    body = {"response_type": "ephemeral", "text": text}
    try:
        async with (
            aiohttp.ClientSession(timeout=_TIMEOUT) as session,
            session.post(url, json=body) as response,
        ):
            answer = await response.text()
            if response.status != 200:
                log.info("a command's late answer was refused: %d %s", response.status, answer)
                return False
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.info("a command's late answer could not be posted: %s", type(exc).__name__)
        return False
    return True
