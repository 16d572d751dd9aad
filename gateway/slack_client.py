"""The Slack Web API client every part of the gateway shares.

`base_url` comes from `SLACK_API_URL`, so egress proxies and test doubles see every call.
Retries: rate limits (honoring Retry-After) and 5xx answers are retried by slack_sdk's
handlers. Connection errors are deliberately *not* retried here: a post whose response
was lost may have landed, and re-sending it blindly is how a thread gets a reply twice.
The outbox settles that case by looking at the thread first.
"""

from __future__ import annotations

from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient


def slack_client(token: str, base_url: str, *, timeout: int = 15) -> AsyncWebClient:
    return AsyncWebClient(
        token=token,
        base_url=base_url if base_url.endswith("/") else base_url + "/",
        timeout=timeout,
        retry_handlers=[
            AsyncRateLimitErrorRetryHandler(max_retry_count=5),
            AsyncServerErrorRetryHandler(max_retry_count=2),
        ],
    )
