"""Every way a Slack call can fail, mapped once, into the three outcomes callers act on.

    SlackError                 (a SlackClientError, so bolt's own handlers still see it)
     ├── SlackRefused          Slack answered and did not do it: `ok: false` with its error
     │                         code, or a 429 after every retry. Nothing happened; sending
     │                         again only helps if the cause went away.
     ├── SlackOutcomeUnknown   the call reached Slack, or may have, and no answer says what
     │                         happened: a 5xx or `internal_error`-like answer, a connection
     │                         cut after the request went out, no answer within the time
     │                         limit. A read may simply be tried again; a write (a post, a
     │                         stream's start) may have landed, and only the thread can tell.
     └── SlackUnavailable      the call never reached Slack: the connection was refused, the
                               name did not resolve, TLS failed, the request could not be
                               built, or the workspace has no installation to call with.

`slack_failure` is the one mapping, from every `slack_sdk` error, every aiohttp client
error and every OS-level connection error; `MeteredWebClient.api_call`
(gateway/slack/client.py) raises its answer `from` the original, and so does `slack_call`
around what does not go through that client (Socket Mode's own Web API client and
WebSocket). Code above the boundary catches `SlackError` and branches on the outcome,
never on a tuple of foreign types. `tests/gateway/test_slack_errors.py` checks that every
exception class of those libraries maps to exactly one outcome.
What Slack's error code means for us (our token refused, the conversation gone, …) is
gateway/slack/codes.py's table: a refusal carries it as `SlackRefused.meaning`, and the
mapping reads it there to tell a refusal from an error on Slack's side.
A caller that bounds a call with a deadline of its own (`slack_deadline`) gets the same
outcome when that deadline runs out; `worth_rereading` says whether a failed read may
succeed if asked again.

Why `SlackRefused` is also a `SlackApiError`: bolt's OAuth flow (and anything else of
slack_sdk's that is handed our client) catches `SlackApiError` to tell a refused code
exchange from a crash; it must keep doing so.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
from slack_sdk.errors import (
    BotUserAccessError,
    SlackApiError,
    SlackClientConfigurationError,
    SlackClientError,
    SlackClientNotConnectedError,
    SlackObjectFormationError,
    SlackRequestError,
    SlackTokenRotationError,
)
from slack_sdk.web.slack_response import SlackResponse

from gateway.slack.codes import Meaning, meaning_of

# Errors raised before a request is sent: a usage mistake or a missing credential on our side.
_NEVER_SENT: tuple[type[BaseException], ...] = (
    BotUserAccessError,
    SlackClientConfigurationError,
    SlackClientNotConnectedError,
    SlackObjectFormationError,
    SlackRequestError,
    SlackTokenRotationError,
)
# aiohttp errors raised before the request reached Slack (nothing was sent, or nothing that
# Slack could have acted on: no connection, no TLS session, no valid URL).
_NOT_CONNECTED: tuple[type[BaseException], ...] = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
    aiohttp.ServerFingerprintMismatch,
    aiohttp.InvalidURL,
    aiohttp.NonHttpUrlClientError,
    ConnectionRefusedError,
    ssl.SSLError,
)


class SlackError(SlackClientError):
    """A Slack call that did not succeed; `method` is the Web API method, `reason` a short
    word for logs and metrics (Slack's error code, an HTTP status, or the transport's)."""

    def __init__(self, method: str, reason: str) -> None:
        # Exception's own: SlackApiError's (next in a refusal's order) wants a response.
        Exception.__init__(self, f"Slack {method}: {reason}")
        self.method = method
        self.reason = reason


class SlackRefused(SlackError, SlackApiError):
    """Slack answered and refused: `error` is its error code (`channel_not_found`,
    `ratelimited`, …), `meaning` what that means for us (None: nothing in particular,
    gateway/slack/codes.py); `retry_after` the seconds Slack asked to wait, when it said."""

    def __init__(self, method: str, response: SlackResponse) -> None:
        self.error = _error_code(response)
        self.meaning = meaning_of(self.error)
        SlackError.__init__(self, method, self.error)
        self.response = response
        self.retry_after = _retry_after(response)


class SlackOutcomeUnknown(SlackError):
    """The call may have been done by Slack: a write must be looked for before it is sent
    again."""


class SlackUnavailable(SlackError):
    """The call never reached Slack: nothing happened, and Slack cannot be blamed."""


def slack_failure(exc: BaseException, method: str) -> SlackError | None:
    """The outcome of a Slack call that raised `exc`; None for what is not a failure of the
    call itself (a cancellation, a bug of ours), which the caller lets through."""
    if isinstance(exc, SlackError):
        return exc
    if isinstance(exc, SlackApiError):
        return _answered(exc, method)
    if isinstance(exc, (*_NEVER_SENT, *_NOT_CONNECTED)):
        return SlackUnavailable(method, type(exc).__name__)
    if isinstance(exc, (aiohttp.ClientError, OSError, asyncio.TimeoutError)):
        # Sent, or being sent, and then the connection or the clock ran out.
        return SlackOutcomeUnknown(method, type(exc).__name__)
    if isinstance(exc, SlackClientError):
        return SlackUnavailable(method, type(exc).__name__)
    return None


@contextlib.contextmanager
def slack_call(method: str) -> Iterator[None]:
    """What a Slack call inside raises leaves as its outcome, raised from the original;
    what is not a failure of the call (`slack_failure` says None) leaves as it was."""
    try:
        yield
    except Exception as exc:
        failure = slack_failure(exc, method)
        if failure is None or failure is exc:
            raise
        raise failure from exc


@contextlib.asynccontextmanager
async def slack_deadline(method: str, seconds: float) -> AsyncIterator[None]:
    """Bound a Slack call by `seconds` of our own: when they run out, the call was cut
    while Slack may have been doing it (`SlackOutcomeUnknown`)."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError as exc:
        raise SlackOutcomeUnknown(method, f"no answer within {seconds:g}s") from exc


def worth_rereading(failure: SlackError) -> bool:
    """Whether a read that failed with `failure` may succeed if asked again: Slack was out
    of reach or did not answer, or asked us to slow down (`ratelimited`). Any other
    refusal (`missing_scope`, `channel_not_found`, …) will be given again."""
    if isinstance(failure, SlackRefused):
        return failure.meaning is Meaning.RATE_LIMITED or failure.response.status_code == 429
    return True


def _answered(exc: SlackApiError, method: str) -> SlackError:
    response = exc.response
    if response.status_code >= 500 or meaning_of(_error_code(response)) is Meaning.SLACK_FAILED:
        return SlackOutcomeUnknown(method, _error_code(response))
    return SlackRefused(method, response)


def _error_code(response: SlackResponse) -> str:
    data: Any = response.data
    error = data.get("error") if isinstance(data, dict) else None
    return str(error or f"HTTP {response.status_code}")


def _retry_after(response: SlackResponse) -> float | None:
    headers = {str(k).lower(): v for k, v in (response.headers or {}).items()}
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
