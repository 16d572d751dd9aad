"""A loopback Slack Web API server for tests, reached by the real slack-sdk client.

Mocking `AsyncWebClient` would test our guesses about Slack; this server speaks Slack's
wire format instead (form or JSON bodies, `Authorization: Bearer xoxb-…`, HTTP 200 with
`{"ok": false, "error": …}` for API errors, 429 + `Retry-After`, 5xx pages), so the real
client, its retry handlers and our error handling all run over a real socket::

    async with FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        client = AsyncWebClient(token="xoxb-test", base_url=slack.url)   # url ends in /api/
        slack.seed_message("C1", "1700000000.000100", "U1", "<@UBOT> hi")
        ...                                                   # run the gateway
        await slack.wait_for_posts(1)
        assert slack.thread("C1", "1700000000.000100") == ["hello"]

Because it is only an HTTP server it serves a gateway in another process just as well
(`SLACK_API_URL=slack.url`), as long as the test's event loop runs while it waits.

Methods: auth.test, users.info, chat.postMessage, chat.update, chat.delete,
chat.postEphemeral, chat.startStream, chat.appendStream, chat.stopStream, conversations.replies,
conversations.history, assistant.threads.setStatus, files.info (tests/fakes/slack_files.py),
agents.sessions.setStatus, assistant.threads.setSuggestedPrompts,
conversations.info (tests/fakes/slack_channels.py: `slack.channels.share(…)`),
assistant.search.context (tests/fakes/slack_search.py: `slack.search`), conversations.open
(a DM's channel is D + the person's id without its U), conversations.members
(tests/fakes/slack_members.py: `slack.members.leave(…)`), views.open (tests/fakes/slack_views.py:
`slack.views.press(…)` and `.submit(…)` build a message shortcut's and a modal's payloads);
`slack.membership.leave(channel)` takes the bot out of a conversation (tests/fakes/slack_membership.py);
views.publish (tests/fakes/slack_home.py: `slack.home`); a slash command's `response_url`
(tests/fakes/slack_commands.py: `slack.responses.issue(team)`, answers in
`slack.responses.answers`); anything else answers `unknown_method`.
apps.connections.open (Socket Mode) wants the app token (`xapp-…`), as Slack does, and
answers with a URL of the `FakeSocketMode` in `socket_mode` (tests/fakes/socket_mode.py);
every other method wants the bot token, and either refuses the other kind of token with
`not_allowed_token_type`.

Scopes: set `granted_scopes` (a list) and every authenticated answer carries Slack's
`x-oauth-scopes` header listing them, as Slack does for the token's granted scopes; left
None (the default), no such header is sent.

Blocks are checked as Slack's Block Kit reference says for the kinds we send (more than 50,
or a malformed one, answers `invalid_blocks`): `markdown` (12,000 characters in a message);
`section` (a `plain_text` or `mrkdwn` text of at most 3,000); `actions` (at most 25
elements; a `button` has a `plain_text` text of at most 75 characters, an `action_id` of at
most 255, a `value` of at most 2,000 and a `style` that is `primary` or `danger` if any);
`context_actions` (1 to 5 `feedback_buttons` or `icon_button` elements; feedback buttons
have a `positive_button` and a `negative_button`, each a `plain_text` text of at most 75
characters and a `value` of at most 2,000); a `block_id` of at most 255 characters. A click
on a stored message's button is `click(channel, ts, action_id, user, vote=…)`: the
`block_actions` payload Slack would send (tests/fakes/slack_events.py), for the test to
deliver over HTTP or Socket Mode.

Record: `ephemerals` (chat.postEphemeral, as `Ephemeral`), `posts` (successful chat.postMessage as `Post`, with the `parse`, `link_names` and
unfurl flags it was sent with), `calls` (every request that arrived, as `Call`, including
refused and faulted ones; chat.update's flags are in its `params`), `statuses` (`Status`),
`streams` (`StreamedMessage`: text, chunks, task cards with their status history, plan
title, state, metadata, recipients), `stream(channel, ts)`, `wait_for_streams(n)`.
`thread()` lists what was posted; `visible_thread()` what a reader sees now: every posted or
streamed message's current text, edits applied, deleted ones gone.

conversations.replies and .history honor `oldest`, `latest` and `inclusive` as Slack does;
`reads.limited = True` answers them in the limited tier of distributed apps (one call a
minute per method and workspace, 15 messages a page, else 429 with Retry-After: 60), its
minute moved on by `reads.advance(seconds)` (tests/fakes/slack_read_limits.py).
`archived` and `deleted` (sets of channel ids) make conversations.info say `is_archived` or
answer `channel_not_found`, and chat.postMessage refuse with `is_archived` or
`channel_not_found`; a user id in `gone_users` makes conversations.open answer `user_not_found`.

Streaming (native streamed replies; chunk rules in tests/fakes/slack_streams.py). The error
codes are those of Slack's method reference; the choices marked * are not documented there
and follow what others measured against the live API:
    chat.startStream   makes a bot message in the thread at once (conversations.replies
                       shows it with the text so far) and answers its `ts`. Needs
                       `thread_ts` (`invalid_arguments`); outside DMs (ids not starting
                       with D) `recipient_user_id` and `recipient_team_id`, else
                       `missing_recipient_user_id` / `missing_recipient_team_id`.
    chat.appendStream  appends; needs `markdown_text` or `chunks`
                       (`markdown_text_or_chunks_required`).
    chat.stopStream    ends the stream; its `metadata` is stored as chat.postMessage's is,
                       its `blocks` go below the text.
    Both at once: `cannot_provide_both_markdown_text_and_chunks`. Over 12,000 characters
    in one `markdown_text`: `msg_too_long`. Malformed chunks: `invalid_chunks`. A stream
    opened in one mode and fed the other: `streaming_mode_mismatch`. Appending to or
    stopping an unknown ts: `message_not_found`; a message that is not the bot's:
    `message_not_owned_by_app`; one not streaming (posted, stopped, expired):
    `message_not_in_streaming_state`; one stopped with `stop_stream_as_user`:
    `stopped_by_user`. *chat.update of a message still streaming answers
    `streaming_state_conflict`; once stopped, chat.update and chat.delete work as on any
    message (chat.delete of a streaming message ends the stream).
    `refuse_streaming(channel=None, error="channel_type_not_supported")` makes the three
    methods answer `error` in one channel, or in all (the workspace lacks the feature):
    Slack documents `channel_type_not_supported` and no workspace-level code.
    *Expiry: Slack stops streams it has not heard from for a while (reports say about five
    minutes; some say counted from the start). `FakeSlack(stream_expiry=seconds,
    stream_expiry_from="last_write" | "start", clock=…)` does the same; off by default, so a
    stream whose writer died simply stays streaming.

Agent sessions (docs.slack.dev "agent sessions", issue 31): agents.sessions.setStatus
creates a thread's session and sets its status (active, processing, suspended, closed;
anything else `invalid_arguments`), answering the warning
`missing_agent_session_stopped_event_subscription` unless `stop_subscribed`;
chat.stopStream's `session_status` (default `active`) sets it for a thread that has one.
Neither a user's Stop nor anything else changes it by itself. `press_stop(channel,
thread_ts)` is the Stop button: it stops the thread's streams as the user and returns their
ts (the `agent_session_stopped` event's `streaming_message_ts`); the test delivers the
event. `sessions`, `session_changes`, `session_status(channel, thread_ts)`.
assistant.threads.setSuggestedPrompts takes one to four `{title, message}` prompts
(`suggested_prompts`); with `experience = "agent"` (the default, manifest `agent_view`) a
call that names a `thread_ts` silently sets nothing, as Slack's reference says.

Faults, queued per API method and consumed one per request, in order:
    `rate_limit(method, times=1, retry_after=1)`   HTTP 429 + Retry-After, body `ratelimited`
    `fail(method, status=500, times=1)`            an HTML 5xx page
    `fail_after_recording(method, status=500, times=1)`
                                                   do the work (a post lands), then answer
                                                   with an HTML 5xx page (unknown outcome)
    `refuse(method, error, times=1)`               `{"ok": false, "error": error}`, e.g.
                                                   `missing_scope` (with `needed`)
    `drop_after_recording(method, times=1)`        do the work, then cut the connection
                                                   without answering (unknown outcome)
    `hold(method) -> asyncio.Event`                requests wait until the test sets it
    `clear_faults(method)`                         drop the faults still queued for `method`
    `revoke_token()`                               every later call answers `token_revoked`
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web

from . import WAIT_SECONDS
from .slack_channels import FakeChannels
from .slack_commands import FakeResponseUrls
from .slack_events import CLOCK, block_actions, ts_to_micros
from .slack_files import FakeFiles
from .slack_home import FakeHomeViews
from .slack_members import FakeMembers
from .slack_membership import FakeMembership
from .slack_permalinks import permalink
from .slack_read_limits import ReadLimits
from .slack_search import FakeSearch
from .slack_streams import DISPLAY_MODES, MAX_MARKDOWN, Stream, StreamedMessage, check_payload
from .slack_views import FakeViews

if TYPE_CHECKING:
    from .slack_oauth import FakeOAuth
    from .socket_mode import FakeSocketMode

Params = dict[str, Any]
Body = dict[str, Any]
FaultKind = Literal["ratelimited", "http_error", "http_error_after_work", "refused", "drop"]

_JSON_FIELDS = ("blocks", "attachments", "metadata", "chunks")
_MAX_TEXT = 40_000
_MAX_BLOCKS = 50


@dataclass(frozen=True, slots=True)
class Post:
    """One successful chat.postMessage."""

    channel: str
    thread_ts: str | None
    text: str
    blocks: list[dict[str, Any]] | None
    metadata: dict[str, Any] | None
    ts: str
    unfurl_links: bool | None = None
    unfurl_media: bool | None = None
    parse: str | None = None
    link_names: bool | None = None

    @property
    def may_link_names(self) -> bool:
        """Whether Slack would turn bare `@here`/`@name` in `text` into pings: `link_names`
        set, or `parse=full`. Unset, Slack's defaults apply (and have changed over time)."""
        return self.link_names is not False or self.parse not in ("none", None)


@dataclass(frozen=True, slots=True)
class Call:
    """One request as it arrived: API method, parsed params (JSON fields decoded, token
    removed), the fault it was answered with, if any, and when it arrived (`time.monotonic`)."""

    method: str
    params: Mapping[str, Any]
    fault: FaultKind | None = None
    at: float = 0.0
    token: str | None = None  # the token it was made with (which workspace's)


@dataclass(frozen=True, slots=True)
class Ephemeral:
    """One chat.postEphemeral: seen by `user` only, in `channel` (in a thread if given)."""

    channel: str
    user: str
    text: str
    thread_ts: str | None


@dataclass(frozen=True, slots=True)
class Status:
    """One successful assistant.threads.setStatus ("" clears the status)."""

    channel_id: str
    thread_ts: str
    status: str


@dataclass(frozen=True, slots=True)
class SessionChange:
    """One change of a thread's agent session status: by agents.sessions.setStatus, or by
    chat.stopStream's `session_status` (default `active`) on a thread that has a session."""

    channel_id: str
    thread_ts: str
    status: str
    via: str
    at: float


@dataclass(frozen=True, slots=True)
class SuggestedPrompts:
    """What assistant.threads.setSuggestedPrompts set in a conversation (agent messaging:
    for the DM, without `thread_ts`)."""

    channel_id: str
    title: str | None
    prompts: tuple[Mapping[str, str], ...]


SESSION_STATUSES = frozenset({"active", "processing", "suspended", "closed"})
NO_STOP_SUBSCRIPTION = "missing_agent_session_stopped_event_subscription"


@dataclass(frozen=True, slots=True)
class _Fault:
    kind: FaultKind
    status: int = 200
    retry_after: int = 0
    error: str = ""


class FakeSlack:
    """The Slack Web API on 127.0.0.1, with a record of what was asked and scriptable faults."""

    def __init__(
        self,
        *,
        bot_token: str = "xoxb-test",
        app_token: str = "xapp-1-A0APP00001-test",
        bot_user_id: str = "UBOT",
        team_id: str = "T1",
        bot_id: str = "B0BOT00001",
        app_id: str = "A0APP00001",
        team_name: str = "Threadgate Test",
        bot_name: str = "threadgate",
        stream_expiry: float | None = None,
        stream_expiry_from: Literal["last_write", "start"] = "last_write",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.socket_mode: FakeSocketMode | None = None
        # Many workspaces: the OAuth exchange and per-workspace tokens (tests/fakes/slack_oauth.py).
        self.oauth: FakeOAuth | None = None
        self.bot_user_id = bot_user_id
        self.team_id = team_id
        self.bot_id = bot_id
        self.app_id = app_id
        self.team_name = team_name
        self.bot_name = bot_name
        self.posts: list[Post] = []
        self.calls: list[Call] = []
        self.statuses: list[Status] = []
        self.ephemerals: list[Ephemeral] = []
        # What each thread shows now, (channel, thread_ts) → status: as in Slack, a message
        # the bot posts in the thread (or a stream it starts there) clears it.
        self.thread_status: dict[tuple[str, str], str] = {}
        self.users: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.stream_expiry = stream_expiry
        self.stream_expiry_from = stream_expiry_from
        self._clock = clock
        self._streams: dict[tuple[str, str], Stream] = {}
        self._stream_refusals: dict[str | None, str] = {}
        self._faults: dict[str, deque[_Fault]] = defaultdict(deque)
        self._holds: dict[str, asyncio.Event] = {}
        self._revoked = False
        self.granted_scopes: list[str] | None = None
        # Agent sessions (docs.slack.dev "agent sessions"): each thread's status now, and
        # every change. Without the app's `agent_session_stopped` subscription setStatus
        # answers a warning (and Slack shows no Stop button).
        self.sessions: dict[tuple[str, str], str] = {}
        self.session_changes: list[SessionChange] = []
        self.stop_subscribed = True
        # "agent" (manifest `agent_view`) or "assistant" (`assistant_view`): in the agent
        # experience setSuggestedPrompts with a `thread_ts` silently does nothing.
        self.experience: Literal["agent", "assistant"] = "agent"
        self.suggested_prompts: list[SuggestedPrompts] = []
        # People gone: conversations.open answers `user_not_found` for them.
        self.gone_users: set[str] = set()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._url: str | None = None
        self._methods: dict[str, Callable[[Params], Body]] = {
            "auth.test": self._auth_test,
            "users.info": self._users_info,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.delete": self._chat_delete,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "chat.startStream": self._chat_start_stream,
            "chat.appendStream": self._chat_append_stream,
            "chat.stopStream": self._chat_stop_stream,
            "conversations.replies": self._conversations_replies,
            "conversations.history": self._conversations_history,
            "conversations.open": self._conversations_open,
            "assistant.threads.setStatus": self._assistant_threads_set_status,
            "agents.sessions.setStatus": self._agents_sessions_set_status,
            "assistant.threads.setSuggestedPrompts": self._set_suggested_prompts,
            "apps.connections.open": self._apps_connections_open,
            "chat.getPermalink": lambda params: permalink(self.messages, params),
        }
        self.add_user(bot_user_id, name=bot_name, real_name=bot_name, is_bot=True)
        self.files = FakeFiles(bot_token, team_id)  # url_private downloads (slack_files.py)
        self._methods["files.info"] = self.files.info
        self.channels = FakeChannels(team_id)  # conversations.info (slack_channels.py)
        self._methods["conversations.info"] = self.channels.info
        # Slack's read limits for distributed apps (slack_read_limits.py: `reads.limited`).
        self.reads = ReadLimits()
        self.search = FakeSearch(self)  # Real-time Search as one person (slack_search.py)
        self._methods["assistant.search.context"] = self.search.context
        # Channels archived or deleted (slack_channels.py), as chat.postMessage sees them too.
        self.archived, self.deleted = self.channels.archived, self.channels.deleted
        self.members = FakeMembers(self.users, self.deleted)  # conversations.members
        self._methods["conversations.members"] = self.members.list
        # Modals: views.open, a message shortcut's press and a modal's submission
        # (slack_views.py); conversations the bot is not in (slack_membership.py).
        self.views = FakeViews(self, clock=clock)
        self._methods["views.open"] = self.views.open
        self.membership = FakeMembership(self._methods)
        self.home = FakeHomeViews(self.users, team_id, app_id)  # views.publish (slack_home.py)
        self._methods["views.publish"] = self.home.publish
        self.responses = FakeResponseUrls(
            notify=self._notify
        )  # slash commands' response_url (slack_commands.py)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL for `AsyncWebClient(base_url=…)`: `http://127.0.0.1:{port}/api/`."""
        if self._url is None:
            raise RuntimeError("FakeSlack is not running; use `async with FakeSlack() as slack`")
        return self._url

    async def start(self) -> None:
        """Listen on an ephemeral loopback port."""
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle)
        app.router.add_route("GET", "/files-pri/{path:.*}", self.files.handle)
        app.router.add_route("POST", "/commands/{path:.*}", self.responses.handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self._url = f"http://{host}:{port}/api/"
        self.files.origin = self.responses.origin = f"http://{host}:{port}"

    async def close(self) -> None:
        """Release held requests and stop the server."""
        for gate in self._holds.values():
            gate.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeSlack:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- arranging ---------------------------------------------------------------------------

    def add_user(
        self,
        user_id: str,
        *,
        name: str,
        real_name: str = "",
        display_name: str = "",
        is_bot: bool = False,
    ) -> dict[str, Any]:
        """Make `users.info` know a user; returns the stored user object."""
        user = {
            "id": user_id,
            "team_id": self.team_id,
            "name": name,
            "deleted": False,
            "real_name": real_name,
            "is_bot": is_bot,
            "tz": "Europe/Berlin",
            "profile": {
                "real_name": real_name,
                "real_name_normalized": real_name,
                "display_name": display_name,
                "display_name_normalized": display_name,
                "team": self.team_id,
            },
        }
        self.users[user_id] = user
        return user

    def seed_message(
        self, channel: str, ts: str, user: str, text: str, thread_ts: str | None = None
    ) -> dict[str, Any]:
        """Put a user's message into a channel (a thread reply when `thread_ts` is given), for
        conversations.replies/history. Later bot posts get a later ts."""
        CLOCK.observe(ts)
        message: dict[str, Any] = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts,
            "team": self.team_id,
        }
        if thread_ts is not None and thread_ts != ts:
            message["thread_ts"] = thread_ts
            message["parent_user_id"] = self._author_of(channel, thread_ts)
        self.messages[channel].append(message)
        return message

    def rate_limit(self, method: str, *, times: int = 1, retry_after: int = 1) -> None:
        """Answer the next `times` calls of `method` with HTTP 429 and `Retry-After`."""
        self._queue(method, times, _Fault("ratelimited", 429, retry_after))

    def fail(self, method: str, *, status: int = 500, times: int = 1) -> None:
        """Answer the next `times` calls of `method` with an HTML error page and `status`."""
        self._queue(method, times, _Fault("http_error", status))

    def fail_after_recording(self, method: str, *, status: int = 500, times: int = 1) -> None:
        """Perform the next `times` calls of `method` (a post lands in its thread), then
        answer with an HTML error page and `status`, as Slack sometimes does."""
        self._queue(method, times, _Fault("http_error_after_work", status))

    def refuse(self, method: str, error: str, *, times: int = 1) -> None:
        """Answer the next `times` calls of `method` with Slack's API error `error` (HTTP
        200, `ok: false`), doing nothing; `missing_scope` names a needed scope, as Slack's
        does."""
        self._queue(method, times, _Fault("refused", error=error))

    def drop_after_recording(self, method: str, *, times: int = 1) -> None:
        """Perform the next `times` calls of `method` (a post lands in its thread), then cut
        the connection without a response: the caller cannot know it succeeded."""
        self._queue(method, times, _Fault("drop"))

    def clear_faults(self, method: str) -> None:
        """Forget the faults still queued for `method`: its next calls are answered."""
        self._faults.pop(method, None)

    def hold(self, method: str) -> asyncio.Event:
        """Make calls of `method` wait (after being recorded) until the returned event is set."""
        gate = self._holds.setdefault(method, asyncio.Event())
        gate.clear()
        return gate

    def revoke_token(self) -> None:
        """From now on every call answers `token_revoked`, like Slack after an uninstall."""
        self._revoked = True

    def refuse_streaming(
        self, channel: str | None = None, *, error: str = "channel_type_not_supported"
    ) -> None:
        """Answer chat.startStream/appendStream/stopStream in `channel` (in every channel when
        None: a workspace without the feature) with `error`, doing nothing, until
        `allow_streaming`; chat.postMessage keeps working, so the fallback can be tested."""
        self._stream_refusals[channel] = error

    def allow_streaming(self, channel: str | None = None) -> None:
        """Undo `refuse_streaming` for `channel` (None: the workspace-wide refusal)."""
        self._stream_refusals.pop(channel, None)

    def press_stop(self, channel: str, thread_ts: str) -> list[str]:
        """Press the Stop button of the thread's agent session, as a person: Slack stops
        the app's streams still streaming in the thread (later appends and stops answer
        `stopped_by_user`) and leaves the session's status as it is — the app must change
        it. Returns the stopped streams' ts, the event's `streaming_message_ts`. The button
        shows only while the session is `processing` (and the app subscribes to the event)."""
        status = self.sessions.get((channel, thread_ts))
        if status != "processing" or not self.stop_subscribed:
            raise AssertionError(f"no Stop button in {channel}/{thread_ts} (session: {status})")
        stopped = [
            str(stream.message["ts"])
            for stream in self._streams.values()
            if stream.channel == channel
            and stream.thread_ts == thread_ts
            and stream.state == "streaming"
        ]
        for ts in stopped:
            self._streams[(channel, ts)].stop("user")
        return stopped

    def session_status(self, channel: str, thread_ts: str) -> str | None:
        """The thread's agent session status now, None when it has no session."""
        return self.sessions.get((channel, thread_ts))

    def stop_stream_as_user(self, channel: str, ts: str) -> None:
        """Press the stream's Stop button: later appends and stops answer `stopped_by_user`."""
        self._streams[(channel, ts)].stop("user")

    def _queue(self, method: str, times: int, fault: _Fault) -> None:
        self._faults[method].extend([fault] * times)

    # -- inspecting --------------------------------------------------------------------------

    def thread(self, channel: str, thread_ts: str | None) -> list[str]:
        """Texts the bot posted in a thread (its root included), oldest first; `thread_ts=None`
        means top-level posts in the channel."""
        return [
            p.text
            for p in self.posts
            if p.channel == channel
            and (p.thread_ts == thread_ts or (thread_ts is not None and p.ts == thread_ts))
        ]

    def visible_thread(self, channel: str, thread_ts: str | None) -> list[str]:
        """What a reader sees of the bot's messages in a thread (root included), oldest first:
        the current text of each posted or streamed message, after edits, without deleted
        ones. `thread_ts=None` means the bot's top-level messages in the channel."""
        return [
            str(m.get("text", ""))
            for m in sorted(self.messages.get(channel, []), key=lambda m: ts_to_micros(m["ts"]))
            if m.get("user") == self.bot_user_id and thread_ts in (m.get("thread_ts"), m["ts"])
        ]

    @property
    def streams(self) -> list[StreamedMessage]:
        """Every message made with chat.startStream, in the order they were started."""
        self._expire_streams()
        return [stream.view() for stream in self._streams.values()]

    def stream(self, channel: str, ts: str) -> StreamedMessage:
        """The streamed message `ts` in `channel`."""
        self._expire_streams()
        return self._streams[(channel, ts)].view()

    async def wait_for_streams(
        self,
        n: int,
        *,
        stopped: bool = False,
        timeout: float = WAIT_SECONDS,  # noqa: ASYNC109 - see wait_for_posts
    ) -> list[StreamedMessage]:
        """Wait until at least `n` streams were started (`stopped`: and have ended); returns
        the streams."""

        def enough() -> bool:
            return sum(1 for s in self.streams if s.state == "stopped" or not stopped) >= n

        what = f"{n} {'stopped ' if stopped else ''}stream(s)"
        await self.wait_until(enough, timeout, what=what)
        return self.streams

    def message(self, channel: str, ts: str) -> dict[str, Any]:
        """The stored message `ts` in `channel` as it stands (edits applied)."""
        found = self._find(channel, ts)
        if found is None:
            raise AssertionError(f"FakeSlack: no message {ts} in {channel}.\n{self.describe()}")
        return found

    def click(
        self, channel: str, ts: str, action_id: str, *, user: str, vote: str | None = None
    ) -> dict[str, Any]:
        """The `block_actions` payload of `user` clicking the element `action_id` of the
        message `ts` (its `vote` button, "positive" or "negative", for feedback buttons),
        as Slack sends it; the test delivers it (HTTP or Socket Mode)."""
        return block_actions(
            self.message(channel, ts),
            channel=channel,
            action_id=action_id,
            user=user,
            team=self.team_id,
            app_id=self.app_id,
            vote=vote,
        )

    def calls_to(self, method: str) -> list[Call]:
        """The recorded calls of one API method, in order."""
        return [c for c in self.calls if c.method == method]

    # The deadline is part of the helper's contract (it turns a hang into a readable failure),
    # so it is a parameter rather than the caller's asyncio.timeout. Its default is
    # `WAIT_SECONDS`.
    async def wait_for_posts(self, n: int, timeout: float = WAIT_SECONDS) -> list[Post]:  # noqa: ASYNC109
        """Wait until at least `n` messages were posted; returns the posts."""
        await self.wait_until(lambda: len(self.posts) >= n, timeout, what=f"{n} post(s)")
        return list(self.posts)

    async def wait_until(
        self,
        predicate: Callable[[], bool],
        timeout: float = WAIT_SECONDS,  # noqa: ASYNC109 - see wait_for_posts
        *,
        what: str = "condition",
    ) -> None:
        """Wait, re-checking after every request, until `predicate()` holds; on timeout raise
        an AssertionError that lists what was called and posted."""
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(predicate)
        except TimeoutError:
            raise AssertionError(
                f"FakeSlack: timed out after {timeout}s waiting for {what}.\n{self.describe()}"
            ) from None

    def describe(self) -> str:
        """A readable summary of calls and posts, for failure messages."""
        calls = ", ".join(c.method + (f"[{c.fault}]" if c.fault else "") for c in self.calls)
        posts = "\n".join(
            f"  {p.channel} thread={p.thread_ts} ts={p.ts}: {p.text!r}" for p in self.posts
        )
        streams = "\n".join(
            f"  {s.channel} thread={s.thread_ts} ts={s.ts} [{s.state}]: {s.text!r}"
            for s in self.streams
        )
        return (
            f"calls: {calls or '(none)'}\nposts:\n{posts or '  (none)'}"
            f"\nstreams:\n{streams or '  (none)'}"
        )

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- HTTP --------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        try:
            params = await _read_params(request)
        except ValueError:
            return web.json_response({"ok": False, "error": "invalid_json"})
        token = _bearer(request.headers.get("Authorization")) or params.pop("token", None)
        # A fault queued for the code exchange answers it (it has no bot token to check).
        exchange_faulted = method == "oauth.v2.access" and bool(self._faults.get(method))
        if exchange_faulted:
            auth_error = None
        elif self.oauth is not None and self.oauth.handles(method, token):
            answered = self.oauth.answer(
                method, token, params, request.headers.get("Authorization")
            )
            if answered or (token is not None and (refusal := self.oauth.refusal(token, params))):
                self.calls.append(Call(method, params, None, time.monotonic(), token))
                await self._notify()
                return web.json_response(answered or {"ok": False, "error": refusal})
            auth_error = None  # a workspace's token, on its own channels
        else:
            auth_error = self._auth_error(token, method)
        fault = None if auth_error else self._next_fault(method)
        if fault is None and not auth_error:
            retry_after = self.reads.retry_after(method, token)
            fault = None if retry_after is None else _Fault("ratelimited", 429, retry_after)
        self._expire_streams()
        self.calls.append(
            Call(method, params, fault.kind if fault else None, time.monotonic(), token)
        )
        await self._notify()
        if (gate := self._holds.get(method)) is not None:
            await gate.wait()
        response = self._respond(method, self.reads.capped(method, params), auth_error, fault)
        if self.granted_scopes is not None and auth_error is None:
            response.headers["X-OAuth-Scopes"] = ",".join(self.granted_scopes)
        if fault is not None and fault.kind == "drop" and request.transport is not None:
            request.transport.abort()
        await self._notify()
        return response

    def _respond(
        self, method: str, params: Params, auth_error: str | None, fault: _Fault | None
    ) -> web.Response:
        if auth_error:
            return web.json_response({"ok": False, "error": auth_error})
        if fault is not None and fault.kind == "ratelimited":
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(fault.retry_after)},
            )
        if fault is not None and fault.kind == "refused":
            body: Body = {"ok": False, "error": fault.error}
            if fault.error == "missing_scope":
                body |= {"needed": "mpim:history", "provided": "chat:write"}
            return web.json_response(body)
        if fault is not None and fault.kind == "http_error":
            return _error_page(fault.status)
        handler = self._methods.get(method)
        body = handler(params) if handler else {"ok": False, "error": "unknown_method"}
        if fault is not None and fault.kind == "http_error_after_work":
            return _error_page(fault.status)
        return web.json_response(body)

    def _auth_error(self, token: str | None, method: str) -> str | None:
        if self._revoked:
            return "token_revoked"
        if not token:
            return "not_authed"
        wanted, other = (self.bot_token, self.app_token)
        if method == "apps.connections.open":
            wanted, other = other, wanted
        if token == other:
            return "not_allowed_token_type"
        return None if token == wanted else "invalid_auth"

    def _next_fault(self, method: str) -> _Fault | None:
        queue = self._faults.get(method)
        return queue.popleft() if queue else None

    # -- API methods -------------------------------------------------------------------------

    def _auth_test(self, params: Params) -> Body:
        return {
            "ok": True,
            "url": "https://threadgate-test.slack.com/",
            "team": self.team_name,
            "user": self.bot_name,
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _users_info(self, params: Params) -> Body:
        user = self.users.get(str(params.get("user", "")))
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": user}

    def _chat_post_message(self, params: Params) -> Body:
        error = _check_message(params, need_channel=True) or self._unpostable(params)
        if error:
            return {"ok": False, "error": error}
        channel, ts = str(params["channel"]), CLOCK.next()
        thread_ts = str(params.get("thread_ts") or "") or None
        message = self._bot_message(params, ts, thread_ts, channel)
        self.messages[channel].append(message)
        if thread_ts is not None:
            self.thread_status.pop((channel, thread_ts), None)
        self.posts.append(
            Post(
                channel=channel,
                thread_ts=thread_ts,
                text=message["text"],
                blocks=params.get("blocks"),
                metadata=params.get("metadata"),
                ts=ts,
                unfurl_links=_flag(params.get("unfurl_links")),
                unfurl_media=_flag(params.get("unfurl_media")),
                parse=None if params.get("parse") is None else str(params["parse"]),
                link_names=_flag(params.get("link_names")),
            )
        )
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _bot_message(
        self, params: Params, ts: str, thread_ts: str | None, channel: str
    ) -> dict[str, Any]:
        message: dict[str, Any] = {
            "user": self.bot_user_id,
            "type": "message",
            "ts": ts,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "text": str(params.get("text") or ""),
            "team": self.team_id,
            "bot_profile": {
                "id": self.bot_id,
                "app_id": self.app_id,
                "name": self.bot_name,
                "team_id": self.team_id,
            },
        }
        if params.get("blocks"):
            message["blocks"] = params["blocks"]
        if params.get("metadata"):
            message["metadata"] = params["metadata"]
        if thread_ts is not None:
            message["thread_ts"] = thread_ts
            message["parent_user_id"] = self._author_of(channel, thread_ts)
        return message

    def _chat_update(self, params: Params) -> Body:
        error = _check_message(params, need_channel=True)
        if error:
            return {"ok": False, "error": error}
        channel, ts = str(params["channel"]), str(params.get("ts", ""))
        message = self._find(channel, ts)
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        stream = self._streams.get((channel, ts))
        if stream is not None and stream.state == "streaming":
            return {"ok": False, "error": "streaming_state_conflict"}
        for key in ("text", "blocks", "metadata"):
            if key in params:
                message[key] = params[key]
        message["edited"] = {"user": self.bot_user_id, "ts": CLOCK.next()}
        return {"ok": True, "channel": channel, "ts": ts, "text": message.get("text", "")}

    def _chat_post_ephemeral(self, params: Params) -> Body:
        if not params.get("user"):
            return _invalid_arguments("user")
        error = _check_message(params, need_channel=True)
        if error:
            return {"ok": False, "error": error}
        thread_ts = str(params.get("thread_ts") or "") or None
        channel, user = str(params["channel"]), str(params["user"])
        self.ephemerals.append(Ephemeral(channel, user, str(params.get("text") or ""), thread_ts))
        return {"ok": True, "message_ts": CLOCK.next()}

    def _chat_delete(self, params: Params) -> Body:
        channel, ts = str(params.get("channel") or ""), str(params.get("ts") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        message = self._find(channel, ts)
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        if message.get("user") != self.bot_user_id:
            return {"ok": False, "error": "cant_delete_message"}
        self.messages[channel].remove(message)
        if (stream := self._streams.get((channel, ts))) is not None:
            stream.deleted = True
            if stream.state == "streaming":
                stream.stop("delete")
        return {"ok": True, "channel": channel, "ts": ts}

    # -- streaming -----------------------------------------------------------------------------

    def _chat_start_stream(self, params: Params) -> Body:
        channel = str(params.get("channel") or "")
        error = self._start_error(channel, params)
        if error is not None:
            return error
        ts, thread_ts, now = CLOCK.next(), str(params["thread_ts"]), self._clock()
        message = self._bot_message({}, ts, thread_ts, channel)
        self.messages[channel].append(message)
        self.thread_status.pop((channel, thread_ts), None)
        stream = Stream(
            message=message,
            channel=channel,
            thread_ts=thread_ts,
            task_display_mode=str(params.get("task_display_mode") or "timeline"),
            recipient_user_id=_optional(params.get("recipient_user_id")),
            recipient_team_id=_optional(params.get("recipient_team_id")),
            last_write=now,
            started=now,
        )
        stream.write(params, now)
        self._streams[(channel, ts)] = stream
        return {"ok": True, "channel": channel, "ts": ts}

    def _start_error(self, channel: str, params: Params) -> Body | None:
        if not channel:
            return _error("channel_not_found")
        if refusal := self._streaming_refusal(channel):
            return _error(refusal)
        if not params.get("thread_ts"):
            return _invalid_arguments("thread_ts")
        if not channel.startswith("D"):  # channels need a recipient; DMs have one
            for field in ("recipient_user_id", "recipient_team_id"):
                if not params.get(field):
                    return _error(f"missing_{field}")
        if str(params.get("task_display_mode", "timeline")) not in DISPLAY_MODES:
            return _invalid_arguments("task_display_mode")
        return self._payload_error(params, need_content=False)

    def _chat_append_stream(self, params: Params) -> Body:
        stream, error = self._writable_stream(params, need_content=True)
        if stream is None:
            return error
        stream.write(params, self._clock())
        return {"ok": True, "channel": stream.channel, "ts": stream.message["ts"]}

    def _chat_stop_stream(self, params: Params) -> Body:
        stream, error = self._writable_stream(params, need_content=False)
        if stream is None:
            return error
        if params.get("blocks") is not None and not _valid_blocks(params["blocks"]):
            return _error("invalid_blocks")
        if params.get("session_status") not in (None, *SESSION_STATUSES):
            return _invalid_arguments("session_status")
        metadata = params.get("metadata")
        if metadata is not None and not _valid_metadata(metadata):
            return _error("invalid_metadata_format")
        stream.write(params, self._clock())
        for key in ("blocks", "metadata"):
            if params.get(key):
                stream.message[key] = params[key]
        stream.stop("app")
        self._session_after_stream(stream, params.get("session_status"))
        return {"ok": True, "channel": stream.channel, "ts": stream.message["ts"]}

    def _session_after_stream(self, stream: Stream, status: Any) -> None:
        """chat.stopStream's `session_status` (default `active`) for the thread's session,
        when it has one."""
        key = (stream.channel, stream.thread_ts)
        if key in self.sessions:
            self._set_session(key, str(status or "active"), "chat.stopStream")

    def _set_session(self, key: tuple[str, str], status: str, via: str) -> None:
        self.sessions[key] = status
        self.session_changes.append(SessionChange(*key, status, via, time.monotonic()))

    def _writable_stream(self, params: Params, *, need_content: bool) -> tuple[Stream | None, Body]:
        """The stream an append or stop is about, or None and Slack's answer why not."""
        channel, ts = str(params.get("channel") or ""), str(params.get("ts") or "")
        if not channel:
            return None, _error("channel_not_found")
        if refusal := self._streaming_refusal(channel):
            return None, _error(refusal)
        if not ts:
            return None, _invalid_arguments("ts")
        message, stream = self._find(channel, ts), self._streams.get((channel, ts))
        if message is None:
            return None, _error("message_not_found")
        if message.get("user") != self.bot_user_id:
            return None, _error("message_not_owned_by_app")
        if stream is None or stream.state == "stopped":
            by_user = stream is not None and stream.stopped_by == "user"
            return None, _error("stopped_by_user" if by_user else "message_not_in_streaming_state")
        error = self._payload_error(params, need_content=need_content)
        mode = stream.mode_of(params)
        if error is None and stream.mode is not None and mode not in (None, stream.mode):
            error = _error("streaming_mode_mismatch")
        return (None, error) if error is not None else (stream, {})

    def _payload_error(self, params: Params, *, need_content: bool) -> Body | None:
        error = check_payload(params, need_content=need_content)
        chunks = params.get("chunks") or []
        if error is None and any(
            c["type"] == "blocks" and not _valid_blocks(c["blocks"]) for c in chunks
        ):
            error = "invalid_blocks"
        return None if error is None else _error(error)

    def _streaming_refusal(self, channel: str) -> str | None:
        return self._stream_refusals.get(channel) or self._stream_refusals.get(None)

    def _expire_streams(self) -> None:
        """Stop every stream left alone for `stream_expiry` seconds, as Slack does."""
        if self.stream_expiry is None:
            return
        now = self._clock()
        for stream in self._streams.values():
            since = stream.started if self.stream_expiry_from == "start" else stream.last_write
            if stream.state == "streaming" and now - since >= self.stream_expiry:
                stream.stop("expiry")

    def _conversations_replies(self, params: Params) -> Body:
        channel, ts = str(params.get("channel") or ""), str(params.get("ts") or "")
        if not channel or not ts:
            return _invalid_arguments("channel" if not channel else "ts")
        root = self._thread_root(channel, ts)
        thread = sorted(
            (m for m in self.messages.get(channel, []) if root in (m["ts"], m.get("thread_ts"))),
            key=lambda m: ts_to_micros(m["ts"]),
        )
        if not thread:
            return {"ok": False, "error": "thread_not_found"}
        with_metadata = _flag(params.get("include_all_metadata")) is True
        rendered = [
            self._render(m, root, len(thread) - 1, with_metadata)
            for m in thread
            if _in_window(m["ts"], params)
        ]
        return _paginate(rendered, params)

    def _conversations_history(self, params: Params) -> Body:
        channel = str(params.get("channel") or "")
        if not channel:
            return _invalid_arguments("channel")
        top_level = [
            m for m in self.messages.get(channel, []) if m.get("thread_ts") in (None, m["ts"])
        ]
        newest_first = sorted(top_level, key=lambda m: ts_to_micros(m["ts"]), reverse=True)
        with_metadata = _flag(params.get("include_all_metadata")) is True
        rendered = [
            self._render(m, m["ts"], self._reply_count(channel, m["ts"]), with_metadata)
            for m in newest_first
            if _in_window(m["ts"], params)
        ]
        return _paginate(rendered, params)

    def _unpostable(self, params: Params) -> str | None:
        channel = str(params.get("channel") or "")
        if channel in self.deleted:
            return "channel_not_found"
        return "is_archived" if channel in self.archived else None

    def _conversations_open(self, params: Params) -> Body:
        """A DM with one person: its channel id follows from theirs (D + the id's rest)."""
        users = [u for u in str(params.get("users") or "").split(",") if u]
        if len(users) != 1:
            return {
                "ok": False,
                "error": "users_list_not_supplied" if not users else "not_supported",
            }
        if users[0] in self.gone_users:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "channel": {"id": f"D{users[0][1:]}"}}

    def _assistant_threads_set_status(self, params: Params) -> Body:
        channel_id, thread_ts = params.get("channel_id"), params.get("thread_ts")
        if not channel_id or not thread_ts or "status" not in params:
            missing = "channel_id" if not channel_id else "thread_ts" if not thread_ts else "status"
            return _invalid_arguments(missing)
        self.statuses.append(Status(str(channel_id), str(thread_ts), str(params["status"])))
        self.thread_status[(str(channel_id), str(thread_ts))] = str(params["status"])
        return {"ok": True}

    def _agents_sessions_set_status(self, params: Params) -> Body:
        """Creates the thread's session if needed and sets its status (agent sessions are
        thread-based: `channel_id` and `thread_ts` name the thread)."""
        status, channel_id = params.get("status"), params.get("channel_id")
        thread_ts = params.get("thread_ts")
        if status not in SESSION_STATUSES:
            return _invalid_arguments("status")
        if not channel_id:
            return _error("channel_not_found")
        if not thread_ts:
            return _invalid_arguments("thread_ts")
        self._set_session((str(channel_id), str(thread_ts)), str(status), "setStatus")
        body: Body = {"ok": True, "status": status}
        if not self.stop_subscribed:
            body |= {
                "warning": NO_STOP_SUBSCRIPTION,
                "response_metadata": {"warnings": [NO_STOP_SUBSCRIPTION]},
            }
        return body

    def _set_suggested_prompts(self, params: Params) -> Body:
        """Up to four prompts, each with a title and a message; in the agent experience a
        call with `thread_ts` silently does nothing (docs.slack.dev)."""
        channel_id, prompts = params.get("channel_id"), params.get("prompts")
        if not channel_id:
            return _error("channel_not_found")
        if isinstance(prompts, str):
            with contextlib.suppress(ValueError):
                prompts = json.loads(prompts)
        if not _valid_prompts(prompts):
            return _invalid_arguments("prompts")
        if params.get("thread_ts") and self.experience == "agent":
            return {"ok": True}
        title = params.get("title")
        self.suggested_prompts.append(
            SuggestedPrompts(str(channel_id), None if title is None else str(title), tuple(prompts))
        )
        return {"ok": True}

    def _apps_connections_open(self, params: Params) -> Body:
        if self.socket_mode is None:
            raise RuntimeError(
                "FakeSlack: set `socket_mode` to a FakeSocketMode to open connections"
            )
        return {"ok": True, "url": self.socket_mode.issue_url()}

    # -- store helpers -----------------------------------------------------------------------

    def _find(self, channel: str, ts: str) -> dict[str, Any] | None:
        return next((m for m in self.messages.get(channel, []) if m["ts"] == ts), None)

    def _author_of(self, channel: str, ts: str) -> str | None:
        parent = self._find(channel, ts)
        return parent.get("user") if parent else None

    def _thread_root(self, channel: str, ts: str) -> str:
        message = self._find(channel, ts)
        return str(message.get("thread_ts", ts)) if message else ts

    def _reply_count(self, channel: str, root: str) -> int:
        return sum(
            1 for m in self.messages.get(channel, []) if m.get("thread_ts") == root != m["ts"]
        )

    @staticmethod
    def _render(
        message: dict[str, Any], root: str, replies: int, with_metadata: bool
    ) -> dict[str, Any]:
        rendered = {k: v for k, v in message.items() if with_metadata or k != "metadata"}
        if message["ts"] == root and replies:
            rendered |= {"thread_ts": root, "reply_count": replies}
        return rendered


# -- request parsing and validation --------------------------------------------------------


async def _read_params(request: web.Request) -> Params:
    """Query string, form and JSON body merged, as Slack accepts all three."""
    params: Params = dict(request.query)
    if request.content_type == "application/json":
        body = json.loads(await request.text() or "{}")
        if not isinstance(body, dict):
            raise ValueError("JSON body must be an object")
        params.update(body)
    elif request.can_read_body:
        form = await request.post()
        params.update({k: v for k, v in form.items() if isinstance(v, str)})
    for key in _JSON_FIELDS:
        if isinstance(params.get(key), str):
            # Undecodable JSON stays a string; validation then answers invalid_*_format.
            with contextlib.suppress(ValueError):
                params[key] = json.loads(params[key])
    return params


def _bearer(header: str | None) -> str | None:
    if header and header.lower().startswith("bearer "):
        return header[7:].strip() or None
    return None


def _flag(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    return str(value).lower() in ("1", "true")


def _check_message(params: Params, *, need_channel: bool) -> str | None:
    """Slack's error code for an invalid chat.postMessage/chat.update, or None."""
    if need_channel and not params.get("channel"):
        return "channel_not_found"
    text, blocks = params.get("text"), params.get("blocks")
    if not text and not blocks:
        return "no_text"
    if isinstance(text, str) and len(text) > _MAX_TEXT:
        return "msg_too_long"
    if blocks is not None and not _valid_blocks(blocks):
        return "invalid_blocks"
    metadata = params.get("metadata")
    if metadata is not None and not _valid_metadata(metadata):
        return "invalid_metadata_format"
    return None


def _valid_blocks(blocks: Any) -> bool:
    if not isinstance(blocks, list) or len(blocks) > _MAX_BLOCKS:
        return False
    if not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks):
        return False
    if not all(_valid_block(b) for b in blocks):
        return False
    markdown = sum(len(str(b.get("text", ""))) for b in blocks if b["type"] == "markdown")
    return markdown <= MAX_MARKDOWN


def _valid_block(block: dict[str, Any]) -> bool:
    """The reference's rules for the kinds of block we send (others pass unchecked)."""
    if not _short(block.get("block_id"), 255, optional=True):
        return False
    kind, elements = block["type"], block.get("elements")
    if kind == "section":
        text = block.get("text")
        return (
            isinstance(text, dict)
            and text.get("type") in ("plain_text", "mrkdwn")
            and (_short(text.get("text"), 3000))
        )
    if kind == "actions":
        return (
            isinstance(elements, list)
            and 0 < len(elements) <= 25
            and all(isinstance(e, dict) and _valid_element(e) for e in elements)
        )
    if kind == "context_actions":
        return (
            isinstance(elements, list)
            and 0 < len(elements) <= 5
            and all(isinstance(e, dict) and _valid_context_action(e) for e in elements)
        )
    return True


def _valid_element(element: dict[str, Any]) -> bool:
    if element.get("type") != "button":
        return True  # other interactive elements: not ours, unchecked
    return (
        _plain_text(element.get("text"), 75)
        and _short(element.get("action_id"), 255, optional=True)
        and _short(element.get("value"), 2000, optional=True)
        and element.get("style") in (None, "primary", "danger")
    )


def _valid_context_action(element: dict[str, Any]) -> bool:
    if element.get("type") == "icon_button":
        return _plain_text(element.get("text"), 75)
    if element.get("type") != "feedback_buttons":
        return False
    buttons = [element.get("positive_button"), element.get("negative_button")]
    return _short(element.get("action_id"), 255, optional=True) and all(
        isinstance(b, dict)
        and _plain_text(b.get("text"), 75)
        and _short(b.get("value"), 2000)
        and _short(b.get("accessibility_label"), 75, optional=True)
        for b in buttons
    )


def _plain_text(text: Any, limit: int) -> bool:
    return (
        isinstance(text, dict)
        and text.get("type") == "plain_text"
        and _short(text.get("text"), limit)
    )


def _short(value: Any, limit: int, *, optional: bool = False) -> bool:
    if value is None:
        return optional
    return isinstance(value, str) and 0 < len(value) <= limit


def _valid_metadata(metadata: Any) -> bool:
    return (
        isinstance(metadata, dict)
        and isinstance(metadata.get("event_type"), str)
        and isinstance(metadata.get("event_payload"), dict)
    )


def _valid_prompts(prompts: Any) -> bool:
    return (
        isinstance(prompts, list)
        and 1 <= len(prompts) <= 4
        and all(
            isinstance(p, dict)
            and set(p) == {"title", "message"}
            and all(isinstance(v, str) and v for v in p.values())
            for p in prompts
        )
    )


def _error_page(status: int) -> web.Response:
    page = f"<html><body><h1>{status} Server Error</h1></body></html>"
    return web.Response(status=status, text=page, content_type="text/html")


def _in_window(ts: str, params: Params) -> bool:
    """Whether a message's ts is within `oldest`..`latest` (exclusive unless `inclusive`)."""
    inclusive = _flag(params.get("inclusive")) is True
    at = ts_to_micros(ts)
    if params.get("oldest"):
        oldest = ts_to_micros(str(params["oldest"]))
        if at < oldest or (at == oldest and not inclusive):
            return False
    if params.get("latest"):
        latest = ts_to_micros(str(params["latest"]))
        if at > latest or (at == latest and not inclusive):
            return False
    return True


def _error(error: str) -> Body:
    return {"ok": False, "error": error}


def _optional(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def _invalid_arguments(field: str) -> Body:
    return {
        "ok": False,
        "error": "invalid_arguments",
        "response_metadata": {"messages": [f"[ERROR] missing required field: {field}"]},
    }


def _paginate(messages: list[dict[str, Any]], params: Params) -> Body:
    """One page of `messages`, continuing after Slack's opaque cursor (base64 "next_ts:{ts}")."""
    try:
        start = _decode_cursor(params.get("cursor"), messages)
        limit = max(1, min(int(params.get("limit") or 1000), 1000))
    except ValueError:
        return {"ok": False, "error": "invalid_cursor"}
    page, rest = messages[start : start + limit], messages[start + limit :]
    body: Body = {"ok": True, "messages": page, "has_more": bool(rest)}
    if rest:
        cursor = base64.b64encode(f"next_ts:{rest[0]['ts']}".encode()).decode()
        body["response_metadata"] = {"next_cursor": cursor}
    return body


def _decode_cursor(cursor: Any, messages: list[dict[str, Any]]) -> int:
    if not cursor:
        return 0
    try:
        prefix, _, ts = base64.b64decode(str(cursor)).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError("bad cursor") from exc
    index = next((i for i, m in enumerate(messages) if m["ts"] == ts), None)
    if prefix != "next_ts" or index is None:
        raise ValueError("bad cursor")
    return index
