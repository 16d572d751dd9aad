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
the budget's deadline, and what did not arrive by then is done without
(gateway/inbound/turns.py). A slow Slack delays the ack by at most the budget, never into
Slack's retry.

A message goes through one pipeline of named steps (`Gatekeeper.admit`): is it allowed
(`Policy`); it is kept, whatever becomes of it (store first: gateway/inbound/context.py,
which also says whether we know its thread and what the store holds of it); is it ours to
answer — if not, it is context, kept in its thread's conversation when we take part in it;
a mention in a thread we know with nothing to read or download is stored at once
(`_store_in_known`: one round trip); otherwise what is read for it is decided (`Reading`:
its files, and `ThreadContext.plan`'s back-fill, refresh, gap or channel context), looked
at before downloading (`_looked_up`), read and rendered (`TurnReader`), admitted with a
runtime note of what could not be read, and its outcome reported (`_settle`).

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
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, TypeAlias

from agent import NO_TRACER, Tracer, bind_log_fields
from gateway.inbound.addressing import addresses_someone_else
from gateway.inbound.attachments import FileReader
from gateway.inbound.bots import BotGate
from gateway.inbound.channel_rules import DEFAULT_RULES, REFUSAL_NOTICES, ChannelRules, RulesOf
from gateway.inbound.context import ThreadContext
from gateway.inbound.turns import NOTHING, Reading, ThreadSource, TurnReader
from gateway.slack.events import InboundTurn
from gateway.slack.sharing import ChannelSharing
from gateway.slack.threads import EXTERNAL
from gateway.slack.users import NameDirectory
from gateway.telemetry import outcomes
from gateway.text.secrets import Redactions
from storage import (
    REFUSALS,
    UNLIMITED,
    Admission,
    Admitted,
    Database,
    Limits,
    LimitScope,
    StorageError,
    Stream,
    admit,
    admit_in_known_session,
    before_downloads,
    interrupt_asker,
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


@dataclass(frozen=True, slots=True)
class Policy:
    """Which messages are ours. Empty allowlists allow everyone."""

    continue_threads: bool
    backfill_messages: int
    # The channel's latest messages a top-level mention carries (0: none).
    channel_context_messages: int = 0
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
        return self.refusal(inbound) is None

    def refusal(self, inbound: InboundTurn) -> str | None:
        """Which allowlist refuses the message (gateway/telemetry/outcomes.py), or None."""
        if self.allowed_users and inbound.user not in self.allowed_users:
            return "user_not_allowed"
        # DMs are not channels anyone configures; the user allowlist covers them.
        if inbound.direct or not self.allowed_channels or inbound.channel in self.allowed_channels:
            return None
        return "channel_not_allowed"

    def addressed(self, inbound: InboundTurn, *, known: bool) -> bool:
        """Whether the message asks the bot: a mention, a DM, or (continuing threads) a reply
        in a thread the bot takes part in (`known`) that is not someone else's
        (`may_continue`); never a message kept as context only."""
        if inbound.context_only:
            return False
        return inbound.mentioned or inbound.direct or (known and self.continue_threads)

    def may_continue(self, inbound: InboundTurn, *, bot_user_id: str | None) -> bool:
        """Whether a thread reply may be the bot's at all: a mention or a DM always is; one
        that opens by addressing someone else is theirs (gateway/inbound/addressing.py),
        decided before any look-up, so it costs nothing."""
        if inbound.mentioned or inbound.direct:
            return True
        return not addresses_someone_else(inbound.text, bot_user_id)


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


# Runs an admitting step: in the message's first span, or as it is (already in it).
Traced: TypeAlias = Callable[[Callable[[], Awaitable["Outcome"]]], Awaitable["Outcome"]]


async def _untraced(step: Callable[[], Awaitable[Outcome]]) -> Outcome:
    return await step()


def _default_rules(channel: str) -> ChannelRules:
    return DEFAULT_RULES


def _ignore(found: object) -> None:
    """Nothing to report to."""


@dataclass(frozen=True, slots=True)
class GatekeeperSettings:
    """What the gatekeeper enforces: which messages are ours (`policy`), the time every
    look-up before the ack shares, the deployment's limits, and each channel's rules
    (its own limits, Slack Connect)."""

    policy: Policy
    lookup_budget_seconds: float
    limits: Limits = UNLIMITED
    rules: RulesOf = _default_rules


@dataclass(frozen=True, slots=True)
class GatekeeperPorts:
    """What the gatekeeper reads and tells: the store; one workspace's names, threads,
    files and channels' sharing (None: not read); this process's admissions with
    downloads; the tracer; and who counts the limited messages and redacted credentials."""

    db: Database
    users: NameDirectory
    threads: ThreadSource | None = None
    files: FileReader | None = None
    sharing: ChannelSharing | None = None
    in_flight: InFlight = field(default_factory=InFlight)
    tracer: Tracer = NO_TRACER
    on_limited: Callable[[LimitScope], None] = _ignore
    on_redacted: Callable[[Redactions], None] = _ignore
    # Whether a bot's mention is answered (gateway/inbound/bots.py); None: no bot is.
    bots: BotGate | None = None


class Gatekeeper:
    """An inbound message made a durable task, or told why not (module docstring)."""

    def __init__(self, settings: GatekeeperSettings, ports: GatekeeperPorts) -> None:
        self._settings = settings
        self._policy = settings.policy
        self._ports = ports
        self._db = ports.db
        self._context = ThreadContext(
            ports.db,
            subscribed=settings.policy.continue_threads,
            backfill_messages=settings.policy.backfill_messages,
        )
        self._reader = TurnReader(
            ports.users,
            threads=ports.threads,
            sharing=ports.sharing,
            backfill_messages=settings.policy.backfill_messages,
            context=self._context,
        )

    @property
    def settings(self) -> GatekeeperSettings:
        """The rules it enforces, for another way in held to them (gateway/inbound/asks.py)."""
        return self._settings

    @property
    def ports(self) -> GatekeeperPorts:
        return self._ports

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
        deadline = asyncio.get_running_loop().time() + self._settings.lookup_budget_seconds
        with bind_log_fields(task=inbound.task_id, event=inbound.event_id, **where):
            return await self._admit(inbound, bot_user_id, deadline)

    async def _admit(
        self, inbound: InboundTurn, bot_user_id: str | None, deadline: float
    ) -> Outcome:
        """The pipeline: allowed at all; kept (store first); ours to answer; stored at once
        in a thread we know with nothing to read; else looked up, read and stored. Storing
        is the first span of the message's trace: for a mention or a DM, which asks the
        bot, everything from keeping it on; for other messages, only their admission (most
        are kept and ignored, and make no trace)."""
        if (refusal := self._policy.refusal(inbound)) is not None:
            outcomes.refused(refusal, addressed=inbound.mentioned or inbound.direct)
            return "ignored"
        if inbound.bot_id is not None and not await self._bot_admitted(inbound, bot_user_id):
            return "ignored"  # another bot's post: only where allowed, within the loop guard
        if inbound.mentioned or inbound.direct:
            step = functools.partial(self._handle, inbound, bot_user_id, deadline, _untraced)
            return await self._traced(step)
        return await self._handle(inbound, bot_user_id, deadline, self._traced)

    async def _handle(
        self, inbound: InboundTurn, bot_user_id: str | None, deadline: float, traced: Traced
    ) -> Outcome:
        """`_admit` from keeping the message on, its admitting steps run by `traced`."""
        tally = Redactions()
        # Keeping the message renders it first; its names may take at most half the budget,
        # so a back-fill read the message needs still starts well before the deadline.
        now = asyncio.get_running_loop().time()
        keep_by = now + max(0.0, deadline - now) / 2
        text, _ = await self._reader.turn(inbound, bot_user_id, keep_by, None, tally)
        stream = await self._context.keep(inbound, text)  # store first, whatever comes of it
        known = bool(inbound.thread_ts) and stream.known
        if not self._ours(inbound, bot_user_id) or not (
            self._answered_in_any_thread(inbound) or self._policy.addressed(inbound, known=known)
        ):
            await self._context.as_context(inbound, text, stream)
            if tally:  # an answered message's are counted as its turn is stored
                self._ports.on_redacted(tally)
            return "ignored"
        reading = self._reading(inbound, stream)
        if known and reading.plan is None and self._answered_in_any_thread(inbound):
            return await traced(
                functools.partial(self._in_known_thread, inbound, bot_user_id, deadline)
            )
        async with self._looked_up(inbound, reading) as looked:
            if looked is None:
                return "duplicate"  # what admission would say, without fetching the files
            return await traced(
                functools.partial(self._store, inbound, bot_user_id, looked, deadline)
            )

    def _ours(self, inbound: InboundTurn, bot_user_id: str | None) -> bool:
        """Not context only (a message at the top of a channel), and not a thread reply
        addressed to someone else."""
        if inbound.context_only:
            return False
        if not self._policy.may_continue(inbound, bot_user_id=bot_user_id):
            log.debug("a reply addressed to someone else: not ours to answer")
            return False
        return True

    async def _bot_admitted(self, inbound: InboundTurn, bot_user_id: str | None) -> bool:
        """A bot's mention: allowed, and not past its thread's loop guard."""
        bots = self._ports.bots
        if bots is None:
            outcomes.refused("bot_not_allowed")
            return False
        return await bots.admits(inbound, bot_user_id=bot_user_id)

    def _answered_in_any_thread(self, inbound: InboundTurn) -> bool:
        """A mention or a DM inside a thread, with nothing to download: it is answered
        whether or not we know the thread, which then decides only its back-fill."""
        downloads = self._ports.files is not None and bool(inbound.files)
        return bool(inbound.thread_ts) and (inbound.mentioned or inbound.direct) and not downloads

    async def _in_known_thread(
        self, inbound: InboundTurn, bot_user_id: str | None, deadline: float
    ) -> Outcome:
        """Admitted by the one statement that also asks whether we know its thread, which
        the store said we do; should it be gone since (retention), it is back-filled."""
        outcome = await self._store_in_known(inbound, bot_user_id, deadline)
        if outcome is not None:
            return outcome
        async with self._looked_up(inbound, self._reading(inbound, Stream())) as reading:
            if reading is None:
                return "duplicate"
            return await self._store(inbound, bot_user_id, reading, deadline)

    def _reading(self, inbound: InboundTurn, stream: Stream) -> Reading:
        """What to read for the message: its files, and what its thread needs before it
        (gateway/inbound/context.py: a back-fill of a thread new to us, a refresh, a gap; a
        DM thread that continues the DM's conversation has its history stored)."""
        rules = self._settings.rules(inbound.channel).context_messages
        count = self._policy.channel_context_messages if rules is None else rules
        plan = self._context.plan(inbound, stream, channel_messages=count)
        return Reading(plan=plan, files=self._ports.files)

    @contextlib.asynccontextmanager
    async def _looked_up(
        self, inbound: InboundTurn, reading: Reading
    ) -> AsyncIterator[Reading | None]:
        """What to read, once admission has been asked whether it would take the message at
        all; None: it has its task already. Downloads are the costly part: they wait for
        Slack's other event for this message (in this process) until it is admitted."""
        if reading.files is None or not (inbound.files or reading.backfill):
            yield Reading(plan=reading.plan)
            return
        async with self._ports.in_flight.turn(inbound.task_id):
            before = await before_downloads(
                self._db, admission_of(inbound), self._limits_of(inbound)
            )
            # Refused (or answered by the notice): nothing to fetch.
            yield None if before.has_task else NOTHING if before.limited else reading

    async def _traced(self, step: Callable[[], Awaitable[Outcome]]) -> Outcome:
        """The step as the first span of the message's trace (module docstring)."""
        tracer = self._ports.tracer
        with tracer.resume(None), tracer.span("admission", kind="server") as span:
            outcome = await step()
            span.set({"threadgate.admission": outcome})
        return outcome

    async def _store(
        self, inbound: InboundTurn, bot_user_id: str | None, reading: Reading, deadline: float
    ) -> Outcome:
        """Read and render the message, and admit it."""
        admission, tally = await self._render(inbound, bot_user_id, reading, deadline)
        admitted = await admit(self._db, admission, self._limits_of(inbound))
        await self._interrupt(inbound, admitted)
        return self._settle(admitted, tally)

    async def _store_in_known(
        self, inbound: InboundTurn, bot_user_id: str | None, deadline: float
    ) -> Outcome | None:
        """`_store` with nothing to read, only in a session that exists; None when it does
        not (nothing written, nothing counted)."""
        admission, tally = await self._render(inbound, bot_user_id, NOTHING, deadline)
        admitted = await admit_in_known_session(self._db, admission, self._limits_of(inbound))
        if admitted is None:
            return None
        await self._interrupt(inbound, admitted)
        return self._settle(admitted, tally)

    async def _interrupt(self, inbound: InboundTurn, admitted: Admitted) -> None:
        """Under `interrupt`, the asker's new message stops their working task, which then
        answers everything pending (storage/thread_queue.py). Best effort: the message is
        stored, and without the interrupt it is answered next, as under `collect`."""
        if not admitted or admitted.limited is not None:
            return
        if self._settings.rules(inbound.channel).thread_queue != "interrupt":
            return
        try:
            await interrupt_asker(self._db, inbound.task_id)
        except StorageError as exc:
            log.warning("task %s: the working task was not interrupted: %s", inbound.task_id, exc)

    async def _render(
        self, inbound: InboundTurn, bot_user_id: str | None, reading: Reading, deadline: float
    ) -> tuple[Admission, Redactions]:
        """The message's admission, its turn and `reading` read by the budget's deadline;
        the credentials redacted on the way; what could not be read, noted after the turn."""
        inbound = await self._reader.shared(inbound, deadline)
        refused = self._settings.rules(inbound.channel).refusal(inbound.ext_shared)
        if refused is not None:  # nothing more of the channel is read for a refused message
            reading = NOTHING
        tally = Redactions()
        (turn_text, images), earlier = await self._reader.turn_and_earlier(
            inbound, bot_user_id, deadline, reading, tally
        )
        admission = replace(
            admission_of(inbound, redacted=sum(tally.kinds.values())),
            turn_text=turn_text,
            images=images,
            earlier=earlier.messages,
            refused=refused,
            traceparent=self._ports.tracer.traceparent(),
            note=earlier.note,
        )
        return admission, tally

    def _settle(self, admitted: Admitted, tally: Redactions) -> Outcome:
        """Report what the admission found and did; its outcome."""
        if tally:
            self._ports.on_redacted(tally)
        if admitted.limited is not None:
            self._ports.on_limited(admitted.limited)
            outcomes.refused(admitted.limited)
            return "refused" if admitted.limited in REFUSALS else "limited"
        if not admitted:
            outcomes.duplicate()
            return "duplicate"
        outcomes.admitted()
        return "admitted"

    def _limits_of(self, inbound: InboundTurn) -> Limits:
        return self._settings.rules(inbound.channel).limits or self._settings.limits

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
        inbound = await self._reader.shared(inbound, deadline)
        tally = Redactions()
        if files_note is None:
            text, _ = await self._reader.turn(inbound, bot_user_id, deadline, None, tally)
        else:
            text = await self._reader.text_with_note(
                inbound, bot_user_id, deadline, files_note, tally
            )
        if tally:
            self._ports.on_redacted(tally)
        return text


def admission_of(inbound: InboundTurn, *, redacted: int = 0) -> Admission:
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
            # The message itself: a schedule it asks for says which message asked.
            "ts": inbound.ts,
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
        action_token=inbound.action_token,  # kept with the task, for workspace search
    )
