"""Workspace search: Slack's Real-time Search, as the person who asked, and nothing kept.

Slack's terms forbid a third-party app to keep copies or indexes of Slack data, and point
to the Real-time Search API instead: `assistant.search.context` searches what the asking
person may see. A bot token may call it only with the `action_token` Slack put in that
person's event (a mention or a DM); the token comes with the task (admission keeps it,
storage/action_tokens.py) and is sent in the request's body, never in a URL or a log.

`WorkspaceSearch.search` makes one call per search and answers `Found` (the messages, and
the cursor of the next page) or raises `SearchRefused`, whose message is written for the
model and says what to tell the person:

    no action token      the task was not started by a person's message (a schedule's run,
                         an operator's retry): nothing is asked of Slack
    ratelimited          Slack said to wait: the model is told at once, the round does not
                         sit out a `Retry-After` (this call waits out no 429)
    missing_scope        the installation lacks a search scope: Slack names it, the model
                         is told, and `threadgate doctor` says which (gateway/slack/scopes.py)
    a refused token      `not_allowed_token_type`, `invalid_auth` …: the refusal is about
                         this search's grant, so it raises no token alarm (the client here
                         has none; the workspace's own calls still have theirs)
    invalid_action_token the person's permission ran out (it is short-lived)
    anything else        Slack's code, said as it is; no answer in time: said so

Each search is counted by outcome (`threadgate_workspace_searches_total`: ok, or why not).
What is found is rendered for the model by gateway/slack/search_tool.py.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from slack_sdk.web.async_client import AsyncWebClient

from agent import NO_TRACER, Task, Tracer, sanitize_text
from gateway.slack.client import MeteredWebClient
from gateway.slack.codes import Meaning
from gateway.slack.errors import SlackError, SlackRefused, slack_deadline
from gateway.slack.workspaces import SlackClients
from gateway.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

METHOD = "assistant.search.context"
MAX_RESULTS = 20  # Slack's most per page
NO_TOKEN = "no_action_token"
UNANSWERED = "unanswered"
# What Slack's answer may hold that reaches the model outside a turn's escaped body: each
# is checked for its shape, and left out when it has another.
_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")
_ID = re.compile(r"[A-Z0-9][A-Za-z0-9_-]{0,63}")
_CHANNEL_NAME = re.compile(r"[\w.-]{1,80}")
_PERMALINK = re.compile(r"https://[A-Za-z0-9.-]+/[A-Za-z0-9/._~%?=&:+-]{0,400}")
_CURSOR = re.compile(r"[A-Za-z0-9=_+/:-]{1,512}")


class ActionTokens(Protocol):
    """Where a task's action token is kept while it lives (`storage.PostgresActionTokens`)."""

    async def token_of(self, task_id: str) -> str | None: ...


@dataclass(frozen=True, slots=True)
class FoundMessage:
    """One message Slack found: who wrote it, where, when, its text and its permalink."""

    user: str
    name: str
    channel: str
    ts: str
    text: str
    permalink: str | None = None
    channel_name: str | None = None
    team: str | None = None


@dataclass(frozen=True, slots=True)
class Found:
    """A page of what the search found, and the cursor of the next one (None: no more)."""

    messages: tuple[FoundMessage, ...]
    next_cursor: str | None = None


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """What to search for, and where: Slack's channel types (public_channel,
    private_channel, mpim, im)."""

    query: str
    channel_types: Sequence[str]
    limit: int = 10
    cursor: str | None = None


class SearchRefused(ValueError):
    """The search could not be made; the message is for the model, `outcome` for metrics."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


_TELL = "Answer from what you have, and say in your reply that the workspace could not be searched"


class WorkspaceSearch:
    """Searches a task's workspace as the person whose message started the task."""

    def __init__(
        self,
        clients: SlackClients,
        tokens: ActionTokens,
        *,
        call_seconds: float,
        metrics: Metrics | None = None,
        tracer: Tracer = NO_TRACER,
    ) -> None:
        self._clients = clients
        self._tokens = tokens
        self._call_seconds = call_seconds
        self._metrics = metrics
        self._tracer = tracer

    async def search(self, task: Task, request: SearchRequest) -> Found:
        """One page of what `request` finds, as the task's person may see it."""
        try:
            found = await self._search(task, request)
        except SearchRefused as refused:
            self._count(refused.outcome)
            raise
        self._count("ok")
        return found

    async def _search(self, task: Task, request: SearchRequest) -> Found:
        token = await self._tokens.token_of(task.id)
        if token is None:
            raise SearchRefused(NO_TOKEN, _NO_TOKEN)
        try:
            client = self._client(await self._clients.for_address(task.address))
            async with slack_deadline(METHOD, self._call_seconds):
                response = await client.api_call(METHOD, data=_arguments(request, token))
        except SlackRefused as refused:
            raise _refusal(refused) from refused
        except SlackError as failure:
            log.warning("%s did not answer: %s", METHOD, failure.reason)
            raise SearchRefused(
                UNANSWERED, f"Slack did not answer the search in time. {_TELL} just now."
            ) from failure
        return found_in(response.data if isinstance(response.data, dict) else {})

    def _client(self, workspace: AsyncWebClient) -> MeteredWebClient:
        """The client a search is made with: the workspace's token and connection, without
        the token alarm (a refusal here is about the person's grant, not our token) and
        without waiting out a 429 (the model is told and goes on without the search)."""
        return MeteredWebClient(
            token=workspace.token,
            base_url=workspace.base_url,
            session=workspace.session,
            timeout=workspace.timeout,
            retry_handlers=[],
            metrics=self._metrics,
            call_timeout=self._call_seconds,
            tracer=self._tracer,
        )

    def refused(self, outcome: str) -> None:
        """Count a search its tool refused before asking (gateway/slack/search_tool.py)."""
        self._count(outcome)

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.searched(outcome)


def _arguments(request: SearchRequest, token: str) -> dict[str, Any]:
    """The method's arguments, as Slack's reference names them (messages only)."""
    arguments: dict[str, Any] = {
        "query": request.query,
        "action_token": token,
        "channel_types": ",".join(request.channel_types),
        "content_types": "messages",
        "limit": max(1, min(request.limit, MAX_RESULTS)),
        "include_bots": "false",
    }
    if request.cursor:
        arguments["cursor"] = request.cursor
    return arguments


def _refusal(refused: SlackRefused) -> SearchRefused:
    """Slack's refusal said for the model (module docstring); never with the request."""
    code = refused.error
    if refused.meaning is Meaning.RATE_LIMITED or refused.response.status_code == 429:
        wait = f" (Slack asked to wait {refused.retry_after:g} s)" if refused.retry_after else ""
        return SearchRefused(
            code,
            f"Slack is rate-limiting workspace searches{wait}. Do not search again in this "
            f"answer. {_TELL} right now.",
        )
    if code == "missing_scope":
        needed = _needed(refused.response.data)
        return SearchRefused(
            code,
            f"Slack refused the search: the app lacks the scope {needed} (an operator must "
            f"add it and reinstall the app). {_TELL}.",
        )
    if code == "invalid_action_token":
        return SearchRefused(
            code,
            "Slack refused the search: the permission to search as the person who asked has "
            "expired (it lasts a short while after their message). They can mention you "
            f"again to search. {_TELL}.",
        )
    if refused.meaning is Meaning.TOKEN_REFUSED:
        return SearchRefused(
            code,
            f"Slack refused the app's token for workspace search ({code}). {_TELL}.",
        )
    return SearchRefused(code, f"Slack refused the search ({code}). {_TELL}.")


def _needed(data: Any) -> str:
    needed = data.get("needed") if isinstance(data, Mapping) else None
    if isinstance(needed, str) and re.fullmatch(r"[a-z:._,]{1,200}", needed):
        return needed
    return "it needs"


_NO_TOKEN = (
    "search_workspace cannot search here: only a person's own message (a mention or a "
    "direct message) comes with Slack's permission to search as them, and this task has "
    f"none (a scheduled run, or a retried task). {_TELL}."
)


def found_in(data: Mapping[str, Any]) -> Found:
    """The messages of Slack's answer (`results.messages`) and its next cursor; an entry
    without a usable author, channel or time is left out."""
    results = data.get("results")
    entries = results.get("messages") if isinstance(results, Mapping) else None
    messages = tuple(
        m for m in map(_found_message, entries if isinstance(entries, list) else []) if m
    )
    metadata = data.get("response_metadata")
    cursor = metadata.get("next_cursor") if isinstance(metadata, Mapping) else None
    return Found(
        messages, cursor if isinstance(cursor, str) and _CURSOR.fullmatch(cursor) else None
    )


def _found_message(entry: Any) -> FoundMessage | None:
    if not isinstance(entry, Mapping) or entry.get("is_author_bot") is True:
        return None
    user, channel, ts = (_text(entry, k) for k in ("author_user_id", "channel_id", "message_ts"))
    if not (_ID.fullmatch(user) and _ID.fullmatch(channel) and _TS.fullmatch(ts)):
        return None
    return FoundMessage(
        user=user,
        name=_text(entry, "author_name") or user,
        channel=channel,
        ts=ts,
        text=_text(entry, "content"),
        permalink=_shaped(_text(entry, "permalink"), _PERMALINK),
        channel_name=_shaped(_text(entry, "channel_name"), _CHANNEL_NAME),
        team=_shaped(_text(entry, "team_id"), _ID),
    )


def _text(entry: Mapping[str, Any], key: str) -> str:
    value = entry.get(key)
    return value if isinstance(value, str) else ""


def _shaped(value: str, shape: re.Pattern[str]) -> str | None:
    """`value` when it has `shape` as the model will read it: the frame around a tool's
    output folds look-alike brackets to ASCII (agent.sanitize_text), so it is checked so."""
    clean = sanitize_text(value)
    return clean if shape.fullmatch(clean) else None
