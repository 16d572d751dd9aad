"""Slack event payloads in, `InboundTurn`s out: which events become work, and which do not.

This is the trust boundary for event payloads: pydantic checks the shape, and a payload
that claims to be a message but lacks what a message must have is a `MalformedEvent`
(the HTTP layer answers 400). Events we do not handle — bots that do not mention us, edits, deletions, hidden
subtypes, channel chatter without a mention — translate to None and are acked quietly
(edits and deletions have their own reading, gateway/inbound/edits.py). A person's
message at the top of a channel without a mention is a turn marked `context_only`: never
answered, only kept as the channel's context (gateway/inbound/context.py). A bot's post
becomes a turn only when it mentions us (`app_mention`), with its bot id (`bot_id`): the
bot policy decides the rest (gateway/inbound/bots.py). HTTP and Socket Mode both call
`inbound_turn`, so both see the same rules.

Two subtypes are people talking and are answered like plain messages: `file_share` (a
message with files; a DM with only a file is one) and `thread_broadcast` (a thread reply
also sent to the channel). What Slack says about the files (name, type, size, and the
private URL the gatekeeper downloads them from, `gateway.inbound.files`) rides along as
`SharedFile`s; a file that is not read is described, so the turn can say it was not.
A file Slack gives only by id (a partial object, `"file_access": "check_file_info"`, as
in Slack Connect channels) keeps its id (`SharedFile.info_id`) for the reader to ask
`files.info`. That description is user input like the text and is read leniently: an entry that is not
an object, or a field of the wrong type, is described as unknown rather than refused. Its
texts are sanitized here (`agent.sanitize_text`), before anyone quotes them: the gatekeeper
shows a name as a JSON string, and a fullwidth `＂` folded only later, by the provenance
tag, would end that string early and let one name pass for several files.

Slack's Stop button arrives as `agent_session_stopped` (channel, thread_ts, user, the
`streaming_message_ts` it stopped; the team on the envelope): `session_stopped` reads it
into a `SessionStopped` for gateway/inbound/stops.py.

Whose event it is (`event_tenant`) is read once, here, from the payload's `authorizations`:
the installation Slack delivers it for. The envelope's `team_id` is not that: in a Slack
Connect channel it is the workspace of whoever wrote the message, and an event admitted
under one installation must be answered with its token, counted against its limits and
cancelled by its uninstall, never another's. The writer's own workspace rides along on
the turn as data (`user_team`). Only a payload without `authorizations` (older shapes)
falls back on the envelope's team, and one with neither on its `enterprise_id`: an
organization's own events (Enterprise Grid's org-wide `app_uninstalled` and
`tokens_revoked`) name no team, and are for the org-wide installation.

The `action_token` of a mention or a DM rides along too (`action_token`): workspace search
needs it, and it is kept with the task (storage/action_tokens.py), never shown.

Whether the channel is shared with another organization rides along as the envelope says
it (`is_ext_shared_channel`; None when the envelope does not say, and the gatekeeper asks
`conversations.info`, gateway/slack/sharing.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

from pydantic import BaseModel, StringConstraints, ValidationError

from agent import sanitize_text

# Slack ids and timestamps have fixed shapes; anything else is refused before it can reach
# the database or a provenance tag.
SlackId = Annotated[str, StringConstraints(pattern=r"^[A-Z0-9][A-Za-z0-9_-]{0,63}$")]
SlackTs = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,12}\.[0-9]{1,9}$")]
EventId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
_SLACK_ID = re.compile(r"[A-Z0-9][A-Za-z0-9_-]{0,63}")
# An action token ("12345.98765.abcd2358fdea" in Slack's reference): printable, bounded.
_ACTION_TOKEN = re.compile(r"[A-Za-z0-9._:-]{8,512}")


class MalformedEvent(ValueError):
    """The payload is not a Slack event we can make sense of."""


class _Envelope(BaseModel):
    type: str
    event_id: EventId | None = None
    event: dict[str, Any]
    # Only a boolean says anything; any other value is as good as absent (then looked up).
    is_ext_shared_channel: Any = None


@dataclass(frozen=True, slots=True)
class Tenant:
    """The installation an event is delivered for. `team` keys everything of the tenant
    (task and session ids, limits, the address): the installation's team, or for an
    org-wide install (Enterprise Grid, no team of its own) its enterprise."""

    team: str
    enterprise: str | None = None
    org_wide: bool = False

    @property
    def installed_team(self) -> str | None:
        """The team its installation is looked up by (None: the enterprise's org-wide one)."""
        return None if self.org_wide else self.team


class _Authorization(BaseModel):
    team_id: SlackId | None = None
    enterprise_id: SlackId | None = None
    is_enterprise_install: bool = False


class _Tenancy(BaseModel):
    team_id: SlackId | None = None
    enterprise_id: SlackId | None = None
    authorizations: list[_Authorization] | None = None


def event_tenant(body: Mapping[str, Any]) -> Tenant:
    """The installation the payload is for: its first authorization, else (a payload
    without one) the envelope's team, else its enterprise's org-wide installation.
    `MalformedEvent` if it names none."""
    try:
        tenancy = _Tenancy.model_validate(body)
    except ValidationError as exc:
        raise MalformedEvent(f"event envelope: {summary(exc)}") from exc
    if tenancy.authorizations:
        auth = tenancy.authorizations[0]
        if auth.is_enterprise_install and auth.enterprise_id:
            return Tenant(auth.enterprise_id, auth.enterprise_id, org_wide=True)
        if auth.team_id:
            return Tenant(auth.team_id, auth.enterprise_id)
    if tenancy.team_id is not None:
        return Tenant(tenancy.team_id, tenancy.enterprise_id)
    if tenancy.enterprise_id is not None:
        # An organization's own event (Enterprise Grid: `app_uninstalled`,
        # `tokens_revoked`, `team_access_granted`) names its enterprise and no team: it is
        # for the org-wide installation.
        return Tenant(tenancy.enterprise_id, tenancy.enterprise_id, org_wide=True)
    raise MalformedEvent("event envelope: no team_id, enterprise_id or authorizations")


# Subtypes that are a person's message all the same; every other subtype is not one.
ANSWERED_SUBTYPES = frozenset({"file_share", "thread_broadcast"})
# A file's id, as Slack writes it ("F0123ABCD"): the only thing a partial file object says.
_FILE_ID = re.compile(r"F[A-Z0-9]{2,40}")
# Slack allows 10 files per message; more are described as a count.
MAX_FILES_DESCRIBED = 20


@dataclass(frozen=True, slots=True)
class SharedFile:
    """A file attached to a message, as Slack describes it (None: not said, or not usable)."""

    name: str | None
    kind: str | None
    size: int | None
    # For the download: where Slack serves it, and its type as Slack wrote it (lower case).
    url: str | None = None
    mimetype: str | None = None
    filetype: str | None = None
    # Set for a file Slack gives only by id (`file_access: check_file_info`, as in Slack
    # Connect channels): nothing above is known until `files.info` says it.
    info_id: str | None = None


class _MessageEvent(BaseModel):
    type: str
    user: SlackId
    ts: SlackTs
    channel: SlackId
    text: str = ""
    thread_ts: SlackTs | None = None
    channel_type: str | None = None


@dataclass(frozen=True, slots=True)
class InboundTurn:
    """One user message addressed to the bot; `team` (and `enterprise`) the tenant's
    (`Tenant`), `user_team` the workspace of its writer."""

    team: str
    channel: str
    user: str
    text: str
    ts: str
    thread_ts: str | None
    direct: bool
    event_id: str | None
    mentioned: bool = True
    files: tuple[SharedFile, ...] = ()
    files_not_described: int = 0
    edited: str | None = None  # the Slack ts of the edit, for an edited message
    enterprise: str | None = None
    user_team: str | None = None
    # Whether a thread inside a DM is a conversation of its own (Slack's assistant
    # experience); in the agent experience every DM message is its own thread, and all of
    # them continue the DM's one conversation, its history from our store.
    dm_threads_apart: bool = True
    # Shared with another organization (Slack Connect), as the envelope says; None: unsaid.
    ext_shared: bool | None = None
    # A message at the top of a channel that does not mention the bot: never answered,
    # only kept as the channel's context (gateway/inbound/context.py).
    context_only: bool = False
    # What Slack's Real-time Search wants to search as this message's writer
    # (gateway/slack/search.py): short-lived, a credential, never shown.
    action_token: str | None = field(default=None, repr=False)
    # The bot that wrote it (`B…`), for a bot's mention; None: a person's message.
    bot_id: str | None = None

    @property
    def task_id(self) -> str:
        return f"{self.team}:{self.channel}:{self.ts}"

    @property
    def in_own_thread(self) -> bool:
        """Whether the message is in a thread that is a conversation of its own."""
        return bool(self.thread_ts) and (self.dm_threads_apart or not self.direct)

    @property
    def session_id(self) -> str:
        """A thread is a conversation; a DM message outside one (with the agent experience,
        any DM message) continues the DM's running one."""
        if self.in_own_thread:
            return f"{self.team}:{self.channel}:{self.thread_ts}"
        if self.direct:
            return f"{self.team}:{self.channel}"
        return f"{self.team}:{self.channel}:{self.ts}"

    @property
    def reply_thread_ts(self) -> str:
        return self.thread_ts or self.ts


class _EventShape(BaseModel):
    type: str
    subtype: str | None = None
    # bolt reads these as an id or an object with an id; anything else crashes it.
    user: str | dict[str, Any] | None = None
    channel: str | dict[str, Any] | None = None


class _Shape(BaseModel):
    """The fields bolt's own middleware reads before our listener runs. A wrong type in
    any of them would crash bolt (a 500); here it is a 400."""

    type: str
    team_id: str | None = None
    api_app_id: str | None = None
    event_id: str | None = None
    event: _EventShape | None = None
    authorizations: list[dict[str, Any]] | None = None


def check_shape(body: Mapping[str, Any]) -> None:
    """Raise `MalformedEvent` unless bolt can safely read the payload."""
    try:
        shape = _Shape.model_validate(body)
    except ValidationError as exc:
        raise MalformedEvent(f"payload: {summary(exc)}") from exc
    if shape.event is None and (shape.type == "event_callback" or "event" in body):
        raise MalformedEvent("payload: event must be an object")


# What bolt reads of an interaction payload before any listener runs, whatever its type:
# its tenancy fields (an id, or an object with one) and, by type, the objects it indexes
# without looking (slack_bolt/request/payload_utils.py: `to_step`, `to_action`, `to_view`).
_Owner = str | dict[str, Any] | None


class _InteractionShape(BaseModel):
    type: str
    user: _Owner = None
    team: _Owner = None
    enterprise: _Owner = None
    channel: _Owner = None
    authorizations: list[dict[str, Any]] | None = None
    view: dict[str, Any] | None = None
    actions: list[Any] | None = None
    workflow_step: dict[str, Any] | None = None


def check_interaction_shape(payload: Mapping[str, Any]) -> None:
    """Raise `MalformedEvent` unless bolt can safely read the interaction payload: a
    workflow step's edit or save must carry its `workflow_step` object, a view its type
    (and a `view` that is there must be an object), a click its actions (without them bolt
    raised a KeyError or a TypeError: a 500 and a traceback)."""
    try:
        shape = _InteractionShape.model_validate(payload)
    except ValidationError as exc:
        raise MalformedEvent(f"interaction: {summary(exc)}") from exc
    # Bolt looks inside a `view` that is there at all: present, it must be an object.
    missing = "view must be an object" if "view" in payload and shape.view is None else None
    missing = missing or _missing_part(shape, "callback_id" in payload)
    if missing is not None:
        raise MalformedEvent(f"{shape.type} interaction: {missing}")


def _missing_part(shape: _InteractionShape, has_callback: bool) -> str | None:
    """What bolt would index and the payload lacks, None when nothing."""
    view = shape.view or {}
    if shape.type == "workflow_step_edit" and has_callback and shape.workflow_step is None:
        return "workflow_step must be an object"
    if shape.type == "view_submission" and "callback_id" in view:
        if not isinstance(view.get("type"), str):
            return "view.type must be a string"
        if view["type"] == "workflow_step" and shape.workflow_step is None:
            return "workflow_step must be an object"
    clicks = shape.type == "block_actions" or (shape.type == "interactive_message" and has_callback)
    if clicks and not shape.actions:
        return "actions must be a list of at least one action"
    return None


def inbound_turn(body: Mapping[str, Any]) -> InboundTurn | None:
    """The turn this payload asks us to answer, None if it asks nothing of us."""
    if body.get("type") != "event_callback":
        return None
    try:
        envelope = _Envelope.model_validate(body)
    except ValidationError as exc:
        raise MalformedEvent(f"event envelope: {summary(exc)}") from exc
    event = envelope.event
    if not _a_persons_message(event):
        return None
    shared = envelope.is_ext_shared_channel
    turn = message_turn(event_tenant(body), envelope.event_id, event)
    if not _addressed_to_us(event):
        turn = replace(turn, context_only=True)
    return replace(turn, ext_shared=shared) if isinstance(shared, bool) else turn


class _SessionStopped(BaseModel):
    type: str
    channel: SlackId
    thread_ts: SlackTs
    user: SlackId
    event_ts: SlackTs | None = None
    streaming_message_ts: list[SlackTs] = []


@dataclass(frozen=True, slots=True)
class SessionStopped:
    """Someone pressed Stop on the agent session of a thread (`agent_session_stopped`):
    the tenant's team, the thread, who pressed it, and the streamed messages Slack stopped
    (empty when none was streaming: the work still stops)."""

    team: str
    channel: str
    thread_ts: str
    user: str
    streams: tuple[str, ...] = ()
    enterprise: str | None = None


def session_stopped(body: Mapping[str, Any]) -> SessionStopped | None:
    """The Stop this payload carries, None if it is not `agent_session_stopped`;
    `MalformedEvent` if it is one without its channel, thread or user."""
    event = body.get("event")
    if body.get("type") != "event_callback" or not isinstance(event, Mapping):
        return None
    if event.get("type") != "agent_session_stopped":
        return None
    try:
        stop = _SessionStopped.model_validate(event)
    except ValidationError as exc:
        raise MalformedEvent(f"agent_session_stopped event: {summary(exc)}") from exc
    tenant = event_tenant(body)
    return SessionStopped(
        team=tenant.team,
        channel=stop.channel,
        thread_ts=stop.thread_ts,
        user=stop.user,
        streams=tuple(stop.streaming_message_ts),
        enterprise=tenant.enterprise,
    )


class _HomeOpened(BaseModel):
    type: str
    user: SlackId
    channel: SlackId
    tab: str | None = None


@dataclass(frozen=True, slots=True)
class MessagesOpened:
    """Someone opened the DM with the app (`app_home_opened` with `tab: "messages"`): in
    the agent messaging experience, the moment to offer suggested prompts."""

    team: str
    channel: str
    user: str
    enterprise: str | None = None


def messages_opened(body: Mapping[str, Any]) -> MessagesOpened | None:
    """The DM opening this payload carries; None for anything else (the Home tab too).
    `MalformedEvent` for an `app_home_opened` without its user or channel."""
    event = body.get("event")
    if body.get("type") != "event_callback" or not isinstance(event, Mapping):
        return None
    if event.get("type") != "app_home_opened":
        return None
    try:
        opened = _HomeOpened.model_validate(event)
    except ValidationError as exc:
        raise MalformedEvent(f"app_home_opened event: {summary(exc)}") from exc
    if opened.tab != "messages":
        return None
    tenant = event_tenant(body)
    return MessagesOpened(tenant.team, opened.channel, opened.user, tenant.enterprise)


def message_turn(
    tenant: Tenant, event_id: str | None, event: Mapping[str, Any], *, edited: str | None = None
) -> InboundTurn:
    """A person's message event as a turn of `tenant`, addressed or not (the caller has
    decided); `edited` is the time of an edit (gateway/inbound/edits.py). `MalformedEvent`
    if it is not one."""
    bot = bot_of(event)
    if bot is not None and "user" not in event:
        event = {**event, "user": bot}  # a classic bot post has no user: the bot is its writer
    try:
        message = _MessageEvent.model_validate(event)
    except ValidationError as exc:
        raise MalformedEvent(f"{event.get('type')} event: {summary(exc)}") from exc
    files = event.get("files")
    entries: list[Any] = files if isinstance(files, list) else []
    return InboundTurn(
        team=tenant.team,
        channel=message.channel,
        user=message.user,
        text=message.text,
        ts=message.ts,
        thread_ts=message.thread_ts if message.thread_ts != message.ts else None,
        direct=message.channel_type == "im",
        event_id=event_id,
        mentioned=message.type == "app_mention",
        files=shared_files(entries),
        files_not_described=max(0, len(entries) - MAX_FILES_DESCRIBED),
        edited=edited,
        enterprise=tenant.enterprise,
        user_team=_writer_team(event),
        action_token=action_token(event),
        bot_id=bot,
    )


def bot_of(event: Mapping[str, Any]) -> str | None:
    """The bot (`B…`) that wrote a message event: its `bot_id`, else its `bot_profile`'s
    id; None for a person's message or a bot id that is not a Slack id."""
    profile = event.get("bot_profile")
    found = event.get("bot_id") or (profile.get("id") if isinstance(profile, Mapping) else None)
    return found if isinstance(found, str) and _SLACK_ID.fullmatch(found) else None


def _writer_team(event: Mapping[str, Any]) -> str | None:
    """The writer's workspace (in a Slack Connect channel, not the tenant's): only data,
    so a value that is not a Slack id is left out rather than refused."""
    for key in ("user_team", "team"):
        value = event.get(key)
        if isinstance(value, str) and _SLACK_ID.fullmatch(value):
            return value
    return None


def action_token(event: Mapping[str, Any]) -> str | None:
    """The `action_token` Slack puts in the event of a message that mentions or DMs the
    app (on the event; in an assistant thread's event, in its `assistant_thread`), when it
    has the shape of one; anything else is no token."""
    thread = event.get("assistant_thread")
    for found in (
        event.get("action_token"),
        isinstance(thread, Mapping) and thread.get("action_token"),
    ):
        if isinstance(found, str) and _ACTION_TOKEN.fullmatch(found):
            return found
    return None


def shared_files(entries: Any) -> tuple[SharedFile, ...]:
    """The files of a message's `files` field (an event's or a thread read's), at most
    `MAX_FILES_DESCRIBED`; anything that is not a list is no files."""
    if not isinstance(entries, list):
        return ()
    return tuple(map(_shared_file, entries[:MAX_FILES_DESCRIBED]))


def _a_persons_message(event: Mapping[str, Any]) -> bool:
    """A person's message (a mention, or a message the subscriptions bring), to keep."""
    if event.get("bot_id") or event.get("bot_profile"):
        # A bot's post (ours included) only when it mentions us: then the gatekeeper asks
        # the bot policy (gateway/inbound/bots.py) whether it is answered at all.
        return event.get("type") == "app_mention" and bot_of(event) is not None
    subtype = event.get("subtype")
    if subtype is not None and not (isinstance(subtype, str) and subtype in ANSWERED_SUBTYPES):
        return False  # edits, deletions, joins, bot_message and the other system subtypes
    return event.get("type") in ("app_mention", "message")


def _addressed_to_us(event: Mapping[str, Any]) -> bool:
    """Of people's messages, which may be ours to answer: a mention, a DM always; a
    channel message only as a reply in a thread (the gatekeeper then admits it only if
    the bot already takes part in that thread). The others are context only."""
    if event.get("type") == "app_mention":
        return True
    return event.get("channel_type") == "im" or bool(event.get("thread_ts"))


def _shared_file(entry: Any) -> SharedFile:
    """What Slack says about one file; a file hidden by plan limits has only an id, and
    one Slack gives only by id says where to ask (`files.info`)."""
    if not isinstance(entry, Mapping):
        return SharedFile(None, None, None)
    file_id = entry.get("id")
    by_id = entry.get("file_access") == "check_file_info"
    if by_id and isinstance(file_id, str) and _FILE_ID.fullmatch(file_id):
        return SharedFile(None, None, None, info_id=file_id)
    size = entry.get("size")
    plausible = isinstance(size, int) and not isinstance(size, bool) and 0 <= size < 2**63
    return SharedFile(
        name=_first_text(entry, "name", "title"),
        kind=_first_text(entry, "mimetype", "filetype", "pretty_type"),
        size=size if plausible else None,
        url=_download_url(entry),
        mimetype=_lower(entry.get("mimetype")),
        filetype=_lower(entry.get("filetype")),
    )


def _download_url(entry: Mapping[str, Any]) -> str | None:
    """Where the bytes are: `url_private_download` (the file itself, never a preview page)
    when Slack gives it, else `url_private`. An external file's URL is someone else's."""
    if entry.get("is_external") is True:
        return None
    for key in ("url_private_download", "url_private"):
        value = entry.get(key)
        if isinstance(value, str) and value.startswith(("https://", "http://")):
            return value
    return None


def _lower(value: Any) -> str | None:
    return value.strip().lower()[:100] if isinstance(value, str) and value.strip() else None


def _first_text(entry: Mapping[str, Any], *keys: str) -> str | None:
    """The first of these fields that holds visible text, sanitized."""
    for key in keys:
        value = entry.get(key)
        if isinstance(value, str) and (text := sanitize_text(value)).strip():
            return text
    return None


def summary(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "payload"
    return f"{where}: {first['msg']}"


@dataclass(frozen=True, slots=True)
class HomeOpened:
    """Someone opened the app's Home tab (`app_home_opened` with `tab: "home"`): the
    moment to publish their view (gateway/inbound/home_tab.py)."""

    team: str
    user: str
    enterprise: str | None = None


def home_opened(body: Mapping[str, Any]) -> HomeOpened | None:
    """The Home tab opening this payload carries; None for anything else. `MalformedEvent`
    for an `app_home_opened` without its user or channel."""
    event = body.get("event")
    if body.get("type") != "event_callback" or not isinstance(event, Mapping):
        return None
    if event.get("type") != "app_home_opened" or event.get("tab") != "home":
        return None
    try:
        opened = _HomeOpened.model_validate(event)
    except ValidationError as exc:
        raise MalformedEvent(f"app_home_opened event: {summary(exc)}") from exc
    tenant = event_tenant(body)
    return HomeOpened(tenant.team, opened.user, tenant.enterprise)
