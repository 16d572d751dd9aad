"""The Slack Web API client every part of the gateway shares.

`base_url` comes from `SLACK_API_URL`, so egress proxies and test doubles see every call.
Every call carries a token, so the base must be https — or plain http to a loopback
address, where only a test double on this host listens (`carries_tokens_safely`); any
other is refused with a `ConfigError` naming the variable, here and where the settings
are read.

Retries: a 429 is retried by slack_sdk's handler, honoring Retry-After: Slack refused the
call, so nothing happened and sending it again is safe. Not for the paced reads
(`PACED_READS`: conversations.replies and .history): their 429 is the pacer's to honour
for every replica (gateway/slack/read_pacing.py), and a retry here would wait out a
minute's Retry-After inside one call. A 5xx is not like that: Slack may
have stored the post and then failed to answer (it does), exactly as when a response is
lost on the way. So a 5xx is retried only for reads (`is_read`); anything that creates
or changes something — chat.postMessage, chat.update, chat.delete, the chat.*Stream
calls — is never sent twice here, and neither is anything after a connection error. The
outbox settles an unknown outcome instead: it looks in the thread, then posts if absent
(gateway/delivery/posts.py).

Every call is bounded as a whole by `timeout`, its waits after 429s included (slack_sdk
applies its own timeout per request only, and not at all to a shared session). The
publisher bounds its posts the same way, because the outbox waits for that bound to pass
before it looks for a post whose call never answered.

A call that fails raises one of `gateway.slack.errors`' three outcomes (refused, outcome
unknown, unavailable), mapped there once from whatever slack_sdk, aiohttp or the clock
raised. Every call is counted by method and status, and a refusal of our own token
(`Meaning.TOKEN_REFUSED`, gateway/slack/codes.py) is the one Slack error an operator must
hear about at once: a client given `on_token_refused` (the serving gateway's) logs it at
CRITICAL and hands it on. A client without one is a check's (`doctor`, start-up's
`auth.test`), whose caller says what was refused in its own one sentence: logged as well,
it was printed twice.
Every call is a span of the trace it is made in (`slack {method}`, agent/core/tracing.py).
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import logging
import math
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from agent import NO_TRACER, ConfigError, Supervisor, Tracer
from gateway.slack.codes import Meaning
from gateway.slack.errors import SlackRefused, slack_failure
from gateway.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

TokenRefused = Callable[[str, str], Coroutine[Any, Any, None]]

# A Slack method reads when its last part is one of these verbs, or starts with "get" or
# "lookup" (chat.getPermalink, users.lookupByEmail). Anything else is taken to write.
_READ_VERBS = frozenset({"test", "info", "list", "history", "replies", "members"})


def is_read(method: str) -> bool:
    """Whether calling `method` twice is as harmless as calling it once (it only reads)."""
    verb = method.rsplit(".", 1)[-1]
    return verb in _READ_VERBS or verb.startswith(("get", "lookup"))


# The reads Slack limits per workspace for distributed apps (one a minute), paced by
# gateway/slack/read_pacing.py: never retried after a 429 here.
PACED_READS = frozenset({"conversations.replies", "conversations.history"})


def _method_of(request: HttpRequest) -> str:
    return urlsplit(request.url).path.rsplit("/", 1)[-1]


class UnpacedRateLimitRetryHandler(AsyncRateLimitErrorRetryHandler):
    """slack_sdk's 429 retry, except for the paced reads (module docstring)."""

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        # slack_sdk's own check first: it looks only at the status, and every call is asked.
        retry = await super()._can_retry_async(
            state=state, request=request, response=response, error=error
        )
        return retry and _method_of(request) not in PACED_READS


class ReadServerErrorRetryHandler(AsyncServerErrorRetryHandler):
    """slack_sdk's 5xx retry, for reads only: a write answered 5xx may have happened."""

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        retry = await super()._can_retry_async(
            state=state, request=request, response=response, error=error
        )
        return retry and is_read(_method_of(request))


class MeteredWebClient(AsyncWebClient):
    """AsyncWebClient that counts calls and raises the alarm when our token is refused."""

    def __init__(
        self,
        *args: Any,
        metrics: Metrics | None = None,
        on_token_refused: TokenRefused | None = None,
        supervisor: Supervisor | None = None,
        call_timeout: float,
        workspace: str | None = None,
        tracer: Tracer = NO_TRACER,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._tracer = tracer
        self.workspace = workspace  # which installation's token (OAuth mode), for the log
        self._metrics = metrics
        self._on_token_refused = on_token_refused
        self._supervisor = supervisor or Supervisor()
        self.call_timeout = call_timeout  # the bound of one call, its retries included

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        attributes = {"rpc.system": "slack", "rpc.method": api_method}
        with self._tracer.span(f"slack {api_method}", attributes, kind="client"):
            return await self._api_call(api_method, **kwargs)

    async def _api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:
        auth = kwargs.pop("auth", None)
        if isinstance(auth, dict):
            # The app's credentials (oauth.v2.access): slack_sdk would wrap them in aiohttp's
            # BasicAuth, deprecated (a DeprecationWarning per install). The same header.
            kwargs["headers"] = {**(kwargs.get("headers") or {}), **basic_auth(auth)}
        try:
            async with asyncio.timeout(self.call_timeout):
                response = await super().api_call(api_method, **kwargs)
        except Exception as exc:
            failure = slack_failure(exc, api_method)
            self._count(api_method, type(exc).__name__ if failure is None else failure.reason)
            if failure is None:
                raise
            if isinstance(failure, SlackRefused) and failure.meaning is Meaning.TOKEN_REFUSED:
                await self._token_refused(api_method, failure.error)
            raise failure from exc
        self._count(api_method, "ok")
        return response

    def _count(self, method: str, status: str) -> None:
        if self._metrics is not None:
            self._metrics.slack_calls.labels(method, status).inc()

    async def _token_refused(self, method: str, error: str) -> None:
        if self._on_token_refused is None:
            return  # a check's client: its caller says what was refused, once
        if self.workspace is None:
            log.critical(
                "Slack refused the bot token (%s on %s): check SLACK_BOT_TOKEN", error, method
            )
        else:
            log.critical(
                "Slack refused the bot token of workspace %s (%s on %s): reinstall the app there",
                self.workspace,
                error,
                method,
            )
        # In the background: the caller's own deadline must not cut the alert short.
        self._supervisor.spawn(self._on_token_refused(method, error), name="token-alarm")


def basic_auth(credentials: dict[str, str]) -> dict[str, str]:
    """HTTP basic authentication with an app's client id and secret."""
    pair = f"{credentials['client_id']}:{credentials['client_secret']}".encode()
    return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}


INSECURE_API_URL = (
    "SLACK_API_URL must be an https:// URL (plain http only to a loopback address such as "
    "127.0.0.1): every call sends the bot token to it."
)


def carries_tokens_safely(base_url: str) -> bool:
    """Whether a token sent to `base_url` stays private: https, or http to a loopback IP
    literal (127.0.0.0/8, ::1: a name could resolve anywhere)."""
    try:
        parts = urlsplit(base_url)
        host = parts.hostname or ""
    except ValueError:
        return False
    if parts.scheme == "https":
        return bool(host)
    try:
        return parts.scheme == "http" and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def slack_client(
    token: str | None,
    base_url: str,
    *,
    timeout: float,
    metrics: Metrics | None = None,
    on_token_refused: TokenRefused | None = None,
    supervisor: Supervisor | None = None,
    session: aiohttp.ClientSession | None = None,
    workspace: str | None = None,
    tracer: Tracer = NO_TRACER,
) -> MeteredWebClient:
    """The client; pass a long-lived `session` to reuse connections (without one, slack_sdk
    opens a connection per call). The caller closes the session. `timeout` bounds each
    call as a whole, in seconds. A `base_url` that would expose the token is refused."""
    if not carries_tokens_safely(base_url):
        raise ConfigError(INSECURE_API_URL)
    return MeteredWebClient(
        token=token,
        base_url=base_url if base_url.endswith("/") else base_url + "/",
        timeout=math.ceil(timeout),  # slack_sdk's own, per request: whole seconds
        retry_handlers=[
            UnpacedRateLimitRetryHandler(max_retry_count=5),
            ReadServerErrorRetryHandler(max_retry_count=2),
        ],
        metrics=metrics,
        on_token_refused=on_token_refused,
        supervisor=supervisor,
        session=session,
        call_timeout=timeout,
        workspace=workspace,
        tracer=tracer,
    )
