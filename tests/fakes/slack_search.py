"""What `FakeSlack` answers to `assistant.search.context`: Real-time Search, as one person.

Slack's reference (docs.slack.dev: the method's page, and "Using the Real-time Search
API"): an app searches what the person it acts for may see. With a bot token it must send
the `action_token` Slack put in that person's event — a message that mentions or DMs the
app — and the token is short-lived. Here `grant_action_token(user, team)` hands one out
(tests/fakes/slack_events.py puts one in every mention and DM it builds), and a search is
answered only for a token handed out and not expired (`expire_action_token`).

Arguments (form, JSON or query, as the fake reads every method's):
    query            required
    action_token     the person's grant, required with a bot token
    channel_types    comma-separated `public_channel`, `private_channel`, `mpim`, `im`;
                     default `public_channel`
    content_types    comma-separated `messages`, `files`, `channels`, `users`; default
                     `messages` (the others answer empty lists here)
    limit            1 to 20, default 20
    cursor           the `next_cursor` of the page before
    include_bots     default false: bots' messages (ours too) are left out
    sort, sort_dir   `score` (default) or `timestamp`; `desc` (default) or `asc`

The answer is `{"ok": true, "results": {"messages": [...]}, "response_metadata":
{"next_cursor": "…" or ""}}`, each message with `author_name`, `author_user_id`,
`team_id`, `channel_id`, `channel_name`, `message_ts`, `content`, `is_author_bot` and
`permalink` (the shape of java-slack-sdk's sample response for the method).

What a person may see: a public channel's messages (any of the workspace's people, member
or not, as `search:read.public`'s page says); a private channel's, a group DM's or a DM's
only if they are among its members. A channel is public unless `channel(…)` says
otherwise; a `G…` id is private with no members, and a DM (`D…`) has the person whose id
is its own with U for D (FakeSlack's `conversations.open` rule) and the bot.

Refusals:
    invalid_action_token*    a bot token without an action token, or with one not handed
                             out, expired, or of another workspace
    not_allowed_token_type   the app-level token (FakeSlack refuses it for every method)
    missing_scope            with `granted_scopes` set: `search:read.public` missing, or the
                             scope of a requested channel type (`search:read.private`,
                             `.mpim`, `.im`), named in `needed`
    invalid_arguments*       no query, a limit outside 1–20, an unknown channel or
                             content type
    ratelimited              `FakeSlack.rate_limit("assistant.search.context", …)`: 429 with
                             Retry-After
Codes marked * are our reading where the reference does not say which code.
`searches` records each answered search: the person it ran as and what it returned.
"""

from __future__ import annotations

import base64
import itertools
import re
import secrets
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .slack_permalinks import permalink

if TYPE_CHECKING:
    from .slack_api import FakeSlack

METHOD = "assistant.search.context"
CHANNEL_TYPES = ("public_channel", "private_channel", "mpim", "im")
CONTENT_TYPES = ("messages", "files", "channels", "users")
SCOPE_OF = {
    "public_channel": "search:read.public",
    "private_channel": "search:read.private",
    "mpim": "search:read.mpim",
    "im": "search:read.im",
}
MAX_LIMIT = 20
_WORD = re.compile(r"\w+")
# Words too common to say what a message is about ("what did we decide about the launch?").
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "about",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
    ]
)


@dataclass(frozen=True, slots=True)
class Grant:
    """An action token as Slack hands it out: whose, in which workspace, still valid."""

    user: str
    team: str


_GRANTS: dict[str, Grant] = {}
_EXPIRED: set[str] = set()
_serial = itertools.count(10_000)


def grant_action_token(user: str, team: str) -> str:
    """A fresh action token for `user` of `team`, in the form of the reference's example
    ("12345.98765.abcd2358fdea")."""
    token = f"{next(_serial)}.{secrets.randbelow(90_000) + 10_000}.{secrets.token_hex(6)}"
    _GRANTS[token] = Grant(user, team)
    return token


def expire_action_token(token: str) -> None:
    """Make `token` expired: a search with it answers `invalid_action_token`."""
    _EXPIRED.add(token)


@dataclass
class SearchChannel:
    """A conversation as the search sees it: its name, its type, who is in it."""

    name: str
    kind: str = "public_channel"
    members: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Search:
    """One answered search: who it ran as, the arguments, the message ts it returned."""

    user: str
    params: dict[str, Any]
    found: tuple[str, ...]


class FakeSearch:
    """Real-time Search over the fake's messages, as the action token's person."""

    def __init__(self, slack: FakeSlack) -> None:
        self._slack = slack
        self.channels: dict[str, SearchChannel] = {}
        self.searches: list[Search] = []

    def channel(
        self,
        channel_id: str,
        name: str,
        *,
        kind: str = "public_channel",
        members: Collection[str] = (),
    ) -> None:
        """Say what `channel_id` is: its name, its type (one of `CHANNEL_TYPES`), its members."""
        assert kind in CHANNEL_TYPES, kind
        self.channels[channel_id] = SearchChannel(name, kind, set(members))

    def context(self, params: dict[str, Any]) -> dict[str, Any]:
        """The method: a page of what the token's person may see, or Slack's refusal."""
        grant = self._grant(params.get("action_token"))
        if grant is None:
            return {"ok": False, "error": "invalid_action_token"}
        arguments = _arguments(params)
        if isinstance(arguments, str):
            return {"ok": False, "error": arguments}
        query, types, contents, limit, offset = arguments
        if (needed := self._missing_scope(types)) is not None:
            granted = ",".join(self._slack.granted_scopes or ())
            return {"ok": False, "error": "missing_scope", "needed": needed, "provided": granted}
        found = self._matching(query, types, grant.user, params) if "messages" in contents else []
        page = found[offset : offset + limit]
        more = offset + limit < len(found)
        self.searches.append(Search(grant.user, dict(params), tuple(m["ts"] for _, m in page)))
        return {
            "ok": True,
            "results": {
                "messages": [self._result(channel, m) for channel, m in page],
                "files": [],
                "channels": [],
                "users": [],
            },
            "response_metadata": {"next_cursor": _cursor(offset + limit) if more else ""},
        }

    def _grant(self, token: Any) -> Grant | None:
        grant = _GRANTS.get(token) if isinstance(token, str) else None
        if grant is None or token in _EXPIRED or grant.team != self._slack.team_id:
            return None
        return grant

    def _missing_scope(self, types: tuple[str, ...]) -> str | None:
        granted = self._slack.granted_scopes
        if granted is None:
            return None
        wanted = [SCOPE_OF["public_channel"], *(SCOPE_OF[t] for t in types)]
        return next((scope for scope in wanted if scope not in granted), None)

    def _matching(
        self, query: set[str], types: tuple[str, ...], user: str, params: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any]]]:
        bots = str(params.get("include_bots", "false")).lower() in ("true", "1")
        scored = []
        for channel, messages in self._slack.messages.items():
            where = self._conversation(channel)
            if where.kind not in types or not self._may_see(user, where):
                continue
            for message in messages:
                if (message.get("bot_id") and not bots) or not message.get("user"):
                    continue
                score = len(query & _words(str(message.get("text", ""))))
                if score:
                    scored.append((score, float(message["ts"]), channel, message))
        by_time = params.get("sort") == "timestamp"
        scored.sort(key=lambda s: (s[1],) if by_time else (s[0], s[1]))
        if params.get("sort_dir", "desc") != "asc":
            scored.reverse()
        return [(channel, message) for _, _, channel, message in scored]

    def _conversation(self, channel: str) -> SearchChannel:
        if channel in self.channels:
            return self.channels[channel]
        if channel.startswith("D"):
            return SearchChannel(channel, "im", {f"U{channel[1:]}", self._slack.bot_user_id})
        if channel.startswith("G"):
            return SearchChannel(channel.lower(), "private_channel")
        return SearchChannel(channel.lower())

    @staticmethod
    def _may_see(user: str, where: SearchChannel) -> bool:
        return where.kind == "public_channel" or user in where.members

    def _result(self, channel: str, message: dict[str, Any]) -> dict[str, Any]:
        author = str(message["user"])
        profile = self._slack.users.get(author, {})
        shown = profile.get("profile", {}).get("display_name") or profile.get("real_name")
        return {
            "author_name": shown or profile.get("name") or author,
            "author_user_id": author,
            "team_id": message.get("team", self._slack.team_id),
            "channel_id": channel,
            "channel_name": self._conversation(channel).name,
            "message_ts": message["ts"],
            "content": message.get("text", ""),
            "is_author_bot": bool(message.get("bot_id")),
            "permalink": permalink(
                self._slack.messages, {"channel": channel, "message_ts": message["ts"]}
            )["permalink"],
        }


def _arguments(
    params: dict[str, Any],
) -> tuple[set[str], tuple[str, ...], tuple[str, ...], int, int] | str:
    """The arguments as the search reads them, or the refusal's code."""
    query = _words(str(params.get("query") or ""))
    types = _listed(params.get("channel_types"), "public_channel")
    contents = _listed(params.get("content_types"), "messages")
    try:
        limit = int(params.get("limit", MAX_LIMIT))
        offset = _offset(params.get("cursor"))
    except ValueError:
        return "invalid_arguments"
    if not str(params.get("query") or "").strip() or not 1 <= limit <= MAX_LIMIT:
        return "invalid_arguments"
    if not set(types) <= set(CHANNEL_TYPES) or not set(contents) <= set(CONTENT_TYPES):
        return "invalid_arguments"
    return query, types, contents, limit, offset


def _listed(value: Any, default: str) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    text = str(value or default)
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()


def _offset(cursor: Any) -> int:
    if not cursor:
        return 0
    decoded = base64.urlsafe_b64decode(str(cursor).encode()).decode()
    if not decoded.startswith("offset:"):
        raise ValueError("not a cursor of ours")
    return int(decoded.removeprefix("offset:"))
