"""Every error a Slack call can raise maps to exactly one of three outcomes."""

from __future__ import annotations

import asyncio
import inspect
import ssl
from collections.abc import Iterator

import aiohttp
import pytest
import slack_sdk.errors
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from gateway.slack.errors import (
    SlackError,
    SlackOutcomeUnknown,
    SlackRefused,
    SlackUnavailable,
    slack_call,
    slack_deadline,
    slack_failure,
    worth_rereading,
)
from gateway.slack.workspaces import NotInstalled

OUTCOMES = (SlackRefused, SlackOutcomeUnknown, SlackUnavailable)
_ON_THE_PATH = frozenset({"builtins", "ssl", "socket", "asyncio", "aiohttp", "slack_sdk"})


def _subclasses(root: type[BaseException]) -> Iterator[type[BaseException]]:
    yield root
    for sub in root.__subclasses__():
        yield from _subclasses(sub)


def _foreign_error_classes() -> set[type[BaseException]]:
    roots: list[type[BaseException]] = [aiohttp.ClientError, OSError, asyncio.TimeoutError]
    roots += [
        cls
        for _, cls in inspect.getmembers(slack_sdk.errors, inspect.isclass)
        if issubclass(cls, Exception)
    ]
    found = {cls for root in roots for cls in _subclasses(root)}
    # What a Slack call can raise: the libraries' own and the interpreter's (other packages
    # loaded in this process subclass OSError too, and are not on a Slack call's path).
    # Ours are the outcomes themselves.
    return {
        cls
        for cls in found
        if cls.__module__.split(".")[0] in _ON_THE_PATH and not issubclass(cls, SlackError)
    }


def _response(status: int, data: dict[str, object], headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return AsyncSlackResponse(
        client=None,  # type: ignore[arg-type]
        http_verb="POST",
        api_url="https://slack.test/api/chat.postMessage",
        req_args={},
        data=data,
        headers=headers or {},
        status_code=status,
    )


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance of `cls` built without its constructor's arguments (the mapping reads
    only the type, and a SlackApiError's response)."""
    exc = cls.__new__(cls)
    if isinstance(exc, SlackApiError):
        exc.response = _response(200, {"ok": False, "error": "channel_not_found"})
    return exc


def test_every_library_error_maps_to_exactly_one_outcome() -> None:
    """No slack_sdk, aiohttp, OS or timeout error falls through the mapping."""
    classes = _foreign_error_classes()
    assert len(classes) > 40  # the walk found the libraries' trees, not an empty set
    for cls in classes:
        failure = slack_failure(_instance(cls), "chat.postMessage")
        assert failure is not None, cls
        assert sum(isinstance(failure, kind) for kind in OUTCOMES) == 1, cls


@pytest.mark.parametrize(
    ("status", "data", "kind"),
    [
        (200, {"ok": False, "error": "channel_not_found"}, SlackRefused),
        (200, {"ok": False, "error": "invalid_auth"}, SlackRefused),
        (429, {"ok": False, "error": "ratelimited"}, SlackRefused),
        (200, {"ok": False, "error": "internal_error"}, SlackOutcomeUnknown),
        (200, {"ok": False, "error": "fatal_error"}, SlackOutcomeUnknown),
        (500, {"ok": False}, SlackOutcomeUnknown),
        (503, {"ok": False, "error": "service_unavailable"}, SlackOutcomeUnknown),
    ],
)
def test_slack_answers_map_by_status_and_error(
    status: int, data: dict[str, object], kind: type[SlackError]
) -> None:
    """A refusal is an answer that says nothing happened; a 5xx or an internal error may
    have happened."""
    exc = SlackApiError("refused", _response(status, data))
    failure = slack_failure(exc, "chat.postMessage")
    assert type(failure) is kind
    assert failure.method == "chat.postMessage"


def test_a_refusal_keeps_slacks_error_and_its_retry_after() -> None:
    """A refused call carries Slack's error code and the wait Slack asked for, and stays a
    SlackApiError for bolt's handlers."""
    exc = SlackApiError(
        "x", _response(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "7"})
    )
    failure = slack_failure(exc, "chat.postMessage")
    assert isinstance(failure, SlackRefused) and isinstance(failure, SlackApiError)
    assert (failure.error, failure.retry_after, failure.reason) == (
        "ratelimited",
        7.0,
        "ratelimited",
    )
    assert failure.response["error"] == "ratelimited"


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ConnectionRefusedError(), SlackUnavailable),
        (ssl.SSLError(), SlackUnavailable),
        (aiohttp.InvalidURL("x"), SlackUnavailable),
        (slack_sdk.errors.SlackRequestError("bad"), SlackUnavailable),
        (aiohttp.ServerDisconnectedError(), SlackOutcomeUnknown),
        (aiohttp.ClientPayloadError(), SlackOutcomeUnknown),
        (ConnectionResetError(), SlackOutcomeUnknown),
        (TimeoutError(), SlackOutcomeUnknown),
    ],
)
def test_transport_errors_say_whether_the_call_reached_slack(
    exc: BaseException, kind: type[SlackError]
) -> None:
    """Never connected is unavailable; cut or timed out after sending is unknown."""
    assert type(slack_failure(exc, "chat.postMessage")) is kind


def test_what_is_not_a_call_failure_is_let_through() -> None:
    """A cancellation or a bug of ours is not mapped: the caller sees it as it was."""
    assert slack_failure(asyncio.CancelledError(), "chat.postMessage") is None
    assert slack_failure(KeyError("x"), "chat.postMessage") is None
    assert isinstance(SlackOutcomeUnknown("m", "r"), SlackClientError)


def test_a_workspace_without_the_app_is_unavailable() -> None:
    """No installation means no call could be made: callers see it as Slack unavailable,
    with the workspace named."""
    failure = slack_failure(NotInstalled("T1"), "chat.postMessage")
    assert isinstance(failure, SlackUnavailable) and failure.reason == "not_installed"
    assert str(failure) == "threadgate is not installed in Slack workspace T1"


def test_slack_call_raises_the_outcome_from_the_original() -> None:
    """Around a call that bypasses the metered client, a library error leaves as its
    outcome, caused by the original; anything else leaves as it was."""
    cut = aiohttp.ServerDisconnectedError()
    with pytest.raises(SlackOutcomeUnknown) as raised, slack_call("websocket"):
        raise cut
    assert raised.value.method == "websocket" and raised.value.__cause__ is cut
    mapped = SlackUnavailable("auth.test", "x")
    with pytest.raises(SlackUnavailable) as kept, slack_call("auth.test"):
        raise mapped
    assert kept.value is mapped and kept.value.__cause__ is None
    with pytest.raises(KeyError), slack_call("auth.test"):
        raise KeyError("x")


async def test_a_deadline_of_our_own_leaves_the_outcome_unknown() -> None:
    """A call cut by the caller's own deadline may have been done: outcome unknown."""
    with pytest.raises(SlackOutcomeUnknown) as raised:
        async with slack_deadline("chat.postMessage", 0.01):
            await asyncio.Event().wait()
    assert raised.value.method == "chat.postMessage"


@pytest.mark.parametrize(
    ("failure", "again"),
    [
        (SlackOutcomeUnknown("conversations.replies", "HTTP 503"), True),
        (SlackUnavailable("conversations.replies", "ClientConnectorError"), True),
        (slack_failure(SlackApiError("x", _response(429, {"ok": False})), "m"), True),
        (slack_failure(SlackApiError("x", _response(200, {"error": "ratelimited"})), "m"), True),
        (slack_failure(SlackApiError("x", _response(200, {"error": "missing_scope"})), "m"), False),
    ],
)
def test_a_read_is_worth_asking_again_unless_slack_refused_it_for_good(
    failure: SlackError, again: bool
) -> None:
    """A read that was cut, never sent or rate-limited may succeed later; other refusals not."""
    assert worth_rereading(failure) is again
