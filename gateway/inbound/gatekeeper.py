"""The gatekeeper: from an inbound Slack message to a durable, provenance-tagged task.

It decides whether the message is ours to answer (allowlists; a thread reply without a
mention only where the bot already takes part, and not when it opens by addressing someone
else: gateway/inbound/addressing.py), resolves display names, reads the files
attached (`gateway.inbound.attachments`), turns Slack markup into plain text, wraps it with the
files' text in a `<turn>` tag and admits it in one transaction, pictures included —
together with the thread's earlier messages (and theirs) when the bot is first mentioned
inside an existing thread. The caller acks Slack only after `admit` returns: an acked
event is never lost.
Everything before the ack shares one time budget (`lookup_budget_seconds`, well under
Slack's 3 s): the names, the file downloads and the back-fill run at once, each ends at
the budget's deadline, and what did not arrive by then is done without — a user id stands
in for a name, a file is described as not read ("not downloaded in time"), and a
back-fill keeps the newest messages it has. A slow Slack delays the ack by at most the
budget, never into Slack's retry.

Limits come before downloads: before a message's files are fetched, one read
(`storage.before_downloads`) says whether it has its task already (a redelivery) or is
over a limit — then nothing is fetched, and admission decides as ever. Slack's two events
for one mention (`message` and `app_mention`) arrive together: in this process the second
waits for the first (`InFlight`), then finds its task. An edit is rendered again without
fetching its files: the stored version's account of them is kept (gateway/inbound/revisions.py).

The guard rails against abuse and cost (`Limits`: messages per user and per thread per
hour, tokens per user and per channel per day) are enforced in the admission statement
itself, so every replica counts the same rows. An over-limit message is `limited`: acked,
nothing queued; the first of its window is answered by one polite notice (posted by a
worker after the ack, never here). The thread limit is also the loop breaker: an
integration that answers every bot post in a thread runs into it, gets one notice and
then no more posts to answer.

Each channel has its rules (`gateway.inbound.channel_rules`): its own limits, and whether it
is answered when shared with another organization. A refused message (`refused`) is stored
without its files or its thread, and the first of its thread that day gets one notice,
like an over-limit one. In a shared channel that is answered, the turns of authors of
other organizations say so (`org="external"`), and so does the task's address (`shared`),
for `read_thread`. Credentials in what people wrote are redacted as it is rendered
(`gateway.text.secrets`); the count goes to `on_redacted`, and a turn that had one puts
`redacted` in its task's address, for the reply to say so once (gateway/delivery/publisher.py).

A message to be stored starts its trace (agent/core/tracing.py): the `admission` span
holds its look-ups (names, back-fill, files) and the admission, and its context is stored
with the task, for every later part of the answer to continue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol, TypeAlias, overload

from agent import NO_TRACER, Document, Image, Span, Tracer, bind_log_fields
from gateway.inbound.addressing import addresses_someone_else
from gateway.inbound.attachments import FileContent, FileReader, files_text, images_of, unread
from gateway.inbound.channel_rules import DEFAULT_RULES, REFUSAL_NOTICES, RulesOf
from gateway.slack.events import InboundTurn, SharedFile
from gateway.slack.sharing import ChannelSharing
from gateway.slack.threads import EXTERNAL, ThreadMessage, foreign, render_message, slack_time
from gateway.slack.users import NameDirectory
from gateway.text.markup import mentioned_user_ids
from gateway.text.secrets import Redactions
from storage import (
    REFUSALS,
    UNLIMITED,
    Admission,
    Database,
    EarlierMessage,
    Limits,
    LimitScope,
    admit,
    admit_in_known_session,
    before_downloads,
    session_exists,
)

log = logging.getLogger(__name__)

Outcome: TypeAlias = Literal["admitted", "duplicate", "ignored", "limited", "refused"]

# What the first over-limit message of a window is answered with.
LIMIT_NOTICES: Mapping[LimitScope, str] = {
    "user": (
        "Sorry, you've sent me more messages this hour than I can take from one person, "
        "so I won't answer this one or the next ones until the hour is over."
    ),
    "thread": (
        "Sorry, this thread has had more messages this hour than I answer in one thread, "
        "so I'll stay quiet here until the hour is over."
    ),
    "user_tokens": (
        "Sorry, you've used up today's allowance of AI usage, so I won't answer this "
        "message or the next ones until tomorrow (UTC)."
    ),
    "channel_tokens": (
        "Sorry, this channel has used up today's allowance of AI usage, so I won't answer "
        "here until tomorrow (UTC)."
    ),
    "all_tokens": (
        "Sorry, I've used up today's allowance of AI usage for everyone, so I won't answer "
        "this message or the next ones until tomorrow (UTC)."
    ),
    **REFUSAL_NOTICES,
    "channel_spend": (
        "Sorry, this channel has used up today's budget for AI usage, so I won't answer "
        "here until tomorrow (UTC)."
    ),
    "workspace_spend": (
        "Sorry, this workspace has used up today's budget for AI usage, so I won't answer "
        "this message or the next ones until tomorrow (UTC)."
    ),
}


class ThreadSource(Protocol):
    async def messages(
        self, channel: str, thread_ts: str, *, limit: int, deadline: float | None = None
    ) -> list[ThreadMessage]:
        """At most the latest `limit` messages, oldest first; at `deadline` (event-loop
        time), what was read so far."""


@dataclass(frozen=True, slots=True)
class Policy:
    """Which messages are ours. Empty allowlists allow everyone."""

    continue_threads: bool
    backfill_messages: int
    allowed_channels: frozenset[str] = frozenset()
    allowed_users: frozenset[str] = frozenset()
    # False with Slack's agent experience: a DM's threads all continue the DM's conversation.
    dm_threads_apart: bool = True

    def conversation_of(self, inbound: InboundTurn) -> InboundTurn:
        """The message with its conversation decided: a DM's, per the experience."""
        if not inbound.direct or inbound.dm_threads_apart == self.dm_threads_apart:
            return inbound
        return replace(inbound, dm_threads_apart=self.dm_threads_apart)

    def allows(self, inbound: InboundTurn) -> bool:
        if self.allowed_users and inbound.user not in self.allowed_users:
            return False
        # DMs are not channels anyone configures; the user allowlist covers them.
        return (
            inbound.direct or not self.allowed_channels or inbound.channel in self.allowed_channels
        )

    def addressed(self, inbound: InboundTurn, *, known: bool) -> bool:
        """Whether the message asks the bot: a mention, a DM, or (continuing threads) a reply
        in a thread the bot takes part in (`known`) that is not someone else's
        (`may_continue`)."""
        return inbound.mentioned or inbound.direct or (known and self.continue_threads)

    def may_continue(self, inbound: InboundTurn, *, bot_user_id: str | None) -> bool:
        """Whether a thread reply may be the bot's at all: a mention or a DM always is; one
        that opens by addressing someone else is theirs (gateway/inbound/addressing.py),
        decided before any look-up, so it costs nothing."""
        if inbound.mentioned or inbound.direct:
            return True
        return not addresses_someone_else(inbound.text, bot_user_id)


class Gatekeeper:
    def __init__(
        self,
        db: Database,
        users: NameDirectory,
        *,
        threads: ThreadSource | None = None,
        policy: Policy,
        lookup_budget_seconds: float,
        limits: Limits = UNLIMITED,
        on_limited: Callable[[LimitScope], None] | None = None,
        files: FileReader | None = None,
        in_flight: InFlight | None = None,
        rules: RulesOf = lambda channel: DEFAULT_RULES,
        sharing: ChannelSharing | None = None,
        on_redacted: Callable[[Redactions], None] = lambda found: None,
        tracer: Tracer = NO_TRACER,
    ) -> None:
        self._rules = rules
        self._sharing = sharing
        self._on_redacted = on_redacted
        self._tracer = tracer
        self._files = files
        self._in_flight = in_flight or InFlight()
        self._limits = limits
        self._on_limited = on_limited or (lambda scope: None)
        self._db = db
        self._users = users
        self._threads = threads
        self._policy = policy
        self._budget = lookup_budget_seconds

    async def admit(self, inbound: InboundTurn, *, bot_user_id: str | None) -> Outcome:
        """Store the turn and its task (durable when this returns), or say why not. The
        turn's tenant (team, and enterprise on Enterprise Grid) keys the task, its address
        and its limits; the writer's workspace is only data in the address."""
        inbound = self._policy.conversation_of(inbound)
        where = {
            "team": inbound.team,
            "channel": inbound.channel,
            "thread_ts": inbound.reply_thread_ts,
        }
        with bind_log_fields(task=inbound.task_id, event=inbound.event_id, **where):
            return await self._admit(inbound, bot_user_id)

    async def _admit(self, inbound: InboundTurn, bot_user_id: str | None) -> Outcome:
        if not self._policy.allows(inbound):
            return "ignored"
        if not self._policy.may_continue(inbound, bot_user_id=bot_user_id):
            log.debug("a reply addressed to someone else: not ours to answer")
            return "ignored"
        if self._answered_in_any_thread(inbound):
            return await self._store_at_once(inbound, bot_user_id)
        # Only a message inside a thread asks whether we know the conversation (to continue
        # it without a mention, or to back-fill it); a top-level one saves the round trip.
        known = bool(inbound.thread_ts) and await session_exists(self._db, inbound.session_id)
        if not self._policy.addressed(inbound, known=known):
            return "ignored"
        return await self._after_lookup(inbound, bot_user_id, known=known)

    def _answered_in_any_thread(self, inbound: InboundTurn) -> bool:
        """A mention or a DM inside a thread, with nothing to download: it is answered
        whether or not we know the thread, which then decides only its back-fill."""
        downloads = self._files is not None and bool(inbound.files)
        return bool(inbound.thread_ts) and (inbound.mentioned or inbound.direct) and not downloads

    async def _store_at_once(self, inbound: InboundTurn, bot_user_id: str | None) -> Outcome:
        """Admitted by the one statement that also asks whether we know its thread (one
        round trip where asking first made two, each a turn of the event loop before the
        ack); in a thread new to us, nothing was written, and it is back-filled first. One
        span either way."""
        with self._admission_span() as span:
            outcome = await self._render_and_admit(inbound, bot_user_id, False, None, known=True)
            if outcome is None:
                outcome = await self._after_lookup(inbound, bot_user_id, known=False, traced=False)
            span.set({"threadgate.admission": outcome})
        return outcome

    async def _after_lookup(
        self, inbound: InboundTurn, bot_user_id: str | None, *, known: bool, traced: bool = True
    ) -> Outcome:
        """Back-fill a thread new to us, download the files, and admit (`known`: whether we
        know the thread; `traced`: in a span of its own)."""
        # A DM thread that continues the DM's conversation has its history in our store.
        backfill = not known and inbound.in_own_thread
        if self._files is None or not (inbound.files or backfill):
            return await self._store(inbound, bot_user_id, backfill=backfill, traced=traced)
        # Downloads are the costly part: they wait for Slack's other event for this message
        # (in this process), and for a look at whether admission would take it at all.
        async with self._in_flight.turn(inbound.task_id):
            before = await before_downloads(
                self._db, self._admission(inbound), self._limits_of(inbound)
            )
            if before.has_task:
                return "duplicate"  # what admission would say, without fetching the files
            if before.limited:  # refused (or answered by the notice): nothing to fetch
                return await self._store(inbound, bot_user_id, backfill=False, traced=traced)
            return await self._store(
                inbound, bot_user_id, backfill=backfill, files=self._files, traced=traced
            )

    @contextlib.contextmanager
    def _admission_span(self) -> Iterator[Span]:
        """The first span of the message's trace (module docstring)."""
        with self._tracer.resume(None), self._tracer.span("admission", kind="server") as span:
            yield span

    async def _store(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        *,
        backfill: bool,
        files: FileReader | None = None,
        traced: bool = True,
    ) -> Outcome:
        """Render the turn (reading its files with `files`), back-fill, and admit: the
        first span of the message's trace, unless it runs inside it (`traced` False)."""
        if not traced:
            return await self._render_and_admit(inbound, bot_user_id, backfill, files)
        with self._admission_span() as span:
            outcome = await self._render_and_admit(inbound, bot_user_id, backfill, files)
            span.set({"threadgate.admission": outcome})
        return outcome

    @overload
    async def _render_and_admit(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        backfill: bool,
        files: FileReader | None,
        *,
        known: Literal[False] = False,
    ) -> Outcome: ...

    @overload
    async def _render_and_admit(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        backfill: bool,
        files: FileReader | None,
        *,
        known: Literal[True],
    ) -> Outcome | None: ...

    async def _render_and_admit(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        backfill: bool,
        files: FileReader | None,
        *,
        known: bool = False,
    ) -> Outcome | None:
        """Render and admit; `known`: only in a session that exists, else None (nothing
        written, nothing counted)."""
        deadline = asyncio.get_running_loop().time() + self._budget
        inbound = await self._shared(inbound, deadline)
        refused = self._rules(inbound.channel).refusal(inbound.ext_shared)
        if refused is not None:  # nothing more of the channel is read for a refused message
            backfill, files = False, None
        tally = Redactions()
        (turn_text, images), earlier = await self._turn_and_earlier(
            inbound, bot_user_id, deadline, files, tally, backfill=backfill
        )
        admission = replace(
            self._admission(inbound, redacted=sum(tally.kinds.values())),
            turn_text=turn_text,
            images=images,
            earlier=earlier,
            refused=refused,
            traceparent=self._tracer.traceparent(),
        )
        limits = self._limits_of(inbound)
        if known:
            admitted = await admit_in_known_session(self._db, admission, limits)
            if admitted is None:
                return None
        else:
            admitted = await admit(self._db, admission, limits)
        if tally:
            self._on_redacted(tally)
        if admitted.limited is not None:
            self._on_limited(admitted.limited)
            return "refused" if admitted.limited in REFUSALS else "limited"
        return "admitted" if admitted else "duplicate"

    async def _turn_and_earlier(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        deadline: float,
        files: FileReader | None,
        redactions: Redactions,
        *,
        backfill: bool,
    ) -> tuple[tuple[str, tuple[Image | Document, ...]], Sequence[EarlierMessage]]:
        """The turn and, with `backfill`, the thread's earlier messages, read at once. Only
        then gathered: a gather runs each part as a task of its own, and each costs the ack
        a turn of the event loop, behind whatever else the loop has to do."""
        turn = self._turn(inbound, bot_user_id, deadline, files, redactions)
        if not backfill:
            return await turn, ()
        return await asyncio.gather(
            turn, self._backfill(inbound, bot_user_id, deadline, files, redactions)
        )

    async def _shared(self, inbound: InboundTurn, deadline: float) -> InboundTurn:
        """The turn with its channel's sharing known, as the event said it or as
        `conversations.info` says (None: it could not be checked; see `ChannelRules`)."""
        if inbound.ext_shared is not None or self._sharing is None:
            return inbound
        sharing = await self._sharing.sharing(inbound.channel, deadline)
        if sharing == "unknown":
            return inbound
        return replace(inbound, ext_shared=sharing == "external")

    def _limits_of(self, inbound: InboundTurn) -> Limits:
        return self._rules(inbound.channel).limits or self._limits

    def _admission(self, inbound: InboundTurn, *, redacted: int = 0) -> Admission:
        """The message's admission, its turn not rendered yet (`redacted`: the credentials
        taken out of what it brought)."""
        return Admission(
            event_id=inbound.event_id,
            task_id=inbound.task_id,
            session_id=inbound.session_id,
            address={
                "team": inbound.team,
                "channel": inbound.channel,
                "thread_ts": inbound.reply_thread_ts,
                # The recipient Slack requires for a streamed reply outside DMs.
                "user": inbound.user,
                # Which installation's token serves the task (gateway/slack/workspaces.py).
                **({"enterprise": inbound.enterprise} if inbound.enterprise else {}),
                # The writer's workspace (Slack Connect: not the tenant's), a stream's recipient.
                **({"user_team": inbound.user_team} if inbound.user_team else {}),
                # A channel shared with another organization (for `read_thread`'s turns), and
                # the credentials redacted from the turn (for the reply's note).
                **({"shared": EXTERNAL} if inbound.ext_shared is not False else {}),
                **({"redacted": str(redacted)} if redacted else {}),
            },
            turn_text="",
            user=f"{inbound.team}:{inbound.user}",
            channel=f"{inbound.team}:{inbound.channel}",
        )

    async def render(
        self,
        inbound: InboundTurn,
        *,
        bot_user_id: str | None,
        deadline: float,
        files_note: str | None = None,
    ) -> str:
        """The turn's text as admission stores it, its files never fetched: `files_note`
        (what the stored version says of them) when given, else described as not read. An
        edit is stored again this way; the pictures stored with the first version stay."""
        inbound = await self._shared(inbound, deadline)
        tally = Redactions()
        if files_note is None:
            text, _ = await self._turn(inbound, bot_user_id, deadline, None, tally)
        else:
            names = await self._names([inbound.user, *mentioned_user_ids(inbound.text)], deadline)
            text = render_inbound(
                inbound, names, bot_user_id=bot_user_id, files_note=files_note, redactions=tally
            )
        if tally:
            self._on_redacted(tally)
        return text

    async def _turn(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        deadline: float,
        files: FileReader | None,
        redactions: Redactions,
    ) -> tuple[str, tuple[Image | Document, ...]]:
        """The turn's text and its pictures (and PDFs kept as documents): names and files
        looked up at once."""
        user_ids = [inbound.user, *mentioned_user_ids(inbound.text)]
        if files is None or not inbound.files:  # nothing to download: no gather (above)
            names, contents = await self._names(user_ids, deadline), unread(inbound.files)
        else:
            names, contents = await asyncio.gather(
                self._names(user_ids, deadline), _read_files(files, inbound.files, deadline)
            )
        text = render_inbound(
            inbound, names, bot_user_id=bot_user_id, contents=contents, redactions=redactions
        )
        return text, images_of(contents)

    async def _backfill(
        self,
        inbound: InboundTurn,
        bot_user_id: str | None,
        deadline: float,
        files: FileReader | None,
        redactions: Redactions,
    ) -> Sequence[EarlierMessage]:
        """The thread's messages before this one, rendered as turns with ids from their ts."""
        if self._threads is None or not inbound.thread_ts:
            return ()
        found = await self._threads.messages(
            inbound.channel,
            inbound.thread_ts,
            limit=self._policy.backfill_messages + 1,
            deadline=deadline,
        )
        before = [m for m in found if _ts_key(m.ts) < _ts_key(inbound.ts)][
            -self._policy.backfill_messages :
        ]
        users = {m.user for m in before} | {u for m in before for u in mentioned_user_ids(m.text)}
        names, contents = await asyncio.gather(
            self._names(sorted(users), deadline),
            asyncio.gather(*(_read_files(files, m.files, deadline) for m in before)),
        )
        shared = inbound.ext_shared is not False
        return tuple(
            EarlierMessage(
                earlier_message_id(inbound.team, inbound.channel, m.ts),
                render_message(
                    m,
                    inbound.channel,
                    names,
                    bot_user_id=bot_user_id,
                    note=files_text(read),
                    external=shared and foreign(m.team, inbound.team, inbound.enterprise),
                    redactions=redactions,
                ),
                images_of(read),
            )
            for m, read in zip(before, contents, strict=True)
        )

    async def _names(self, user_ids: list[str], deadline: float | None) -> dict[str, str]:
        try:
            async with asyncio.timeout_at(deadline):
                return await self._users.names(user_ids)
        except TimeoutError:
            return {}  # the ids stand in: a name is decoration, the id is the identity


def earlier_message_id(team: str, channel: str, ts: str) -> str:
    """The stored id of a back-filled message (one that has no task of its own)."""
    return f"slack:{team}:{channel}:{ts}"


async def _read_files(
    reader: FileReader | None, files: Sequence[SharedFile], deadline: float
) -> tuple[FileContent, ...]:
    if reader is None or not files:
        return unread(files)
    return await reader.read(files, deadline)


class InFlight:
    """The messages this process is admitting with downloads, by task id. Slack sends two
    events for a mention (`message` and `app_mention`), at once: the second waits here for
    the first to be admitted, then finds its task and fetches nothing. (Two replicas each
    given one of them both download; admission still stores one turn.)"""

    def __init__(self) -> None:
        self._running: dict[str, asyncio.Event] = {}

    @contextlib.asynccontextmanager
    async def turn(self, task_id: str) -> AsyncIterator[None]:
        """Hold `task_id` while the body runs (bounded by the look-up budget and one
        admission), after whoever held it before."""
        while (running := self._running.get(task_id)) is not None:
            await running.wait()
        done = self._running[task_id] = asyncio.Event()
        try:
            yield
        finally:
            del self._running[task_id]
            done.set()


def render_inbound(
    inbound: InboundTurn,
    names: dict[str, str],
    *,
    bot_user_id: str | None,
    contents: Sequence[FileContent] | None = None,
    files_note: str | None = None,
    redactions: Redactions | None = None,
) -> str:
    """The message as the model will read it: its text, then what came of its files
    (`contents`; None: described, not read; or `files_note`, as rendered before), in one
    provenance tag; marked as another organization's when the channel is shared (or its
    sharing unknown) and its author's team is not the tenant's."""
    message = ThreadMessage(inbound.user, inbound.text, inbound.ts)
    read = unread(inbound.files) if contents is None else contents
    note = files_text(read, inbound.files_not_described) if files_note is None else files_note
    edited = slack_time(inbound.edited) if inbound.edited else None
    shared = inbound.ext_shared is not False
    return render_message(
        message,
        inbound.channel,
        names,
        bot_user_id=bot_user_id,
        note=note,
        edited=edited,
        external=shared and foreign(inbound.user_team, inbound.team, inbound.enterprise),
        redactions=redactions,
    )


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, fraction = ts.partition(".")
    return int(seconds or 0), int(fraction.ljust(6, "0")[:6] or 0)
