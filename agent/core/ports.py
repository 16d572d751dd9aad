"""The ports the agent needs from the world, declared here so the agent owns them.

The agent knows neither Slack nor SQL. It runs tasks from a queue, reads and appends a
conversation's history, hands finished text to a publisher, and charges each model
response to a usage meter (the cap on requests per message and the daily token budgets
read it). `storage/` implements the queue, the history and the meter on Postgres;
`gateway/` implements the publisher on Slack; tests implement them in memory. `address`
on a task is opaque here: it is whatever the gateway needs to find the conversation again
(for Slack, channel and thread).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Literal, Protocol, TypeAlias, overload

from agent.core import ids
from agent.core.citations import Citation
from agent.core.documents import Document
from agent.core.errors import Route
from agent.core.images import Image
from agent.core.notes import RuntimeNote

Role: TypeAlias = Literal["user", "assistant"]
StepState: TypeAlias = Literal["pending", "in_progress", "complete", "error"]
MessageKind: TypeAlias = Literal["turn", "ack", "reply", "summary"]
ToolCallState: TypeAlias = Literal["running", "ok", "error"]
# How a window's operator alert went (`AlertThrottle`): `sent`; `failed` to be sent (the
# kind's next failure tries again); `logged` only, there being nowhere to send it (the
# window holds, and nobody was told).
AlertOutcome: TypeAlias = Literal["sent", "failed", "logged"]


@dataclass(frozen=True, slots=True)
class Task:
    """One user message to answer. Runs alone in its session, leased by one worker."""

    id: str
    session_id: str
    address: Mapping[str, str]
    attempts: int = 1
    created_at: datetime | None = None  # when the message was admitted; None if unknown
    # Whether the task's reply was stored when it was claimed (None: not known, look).
    stored_reply: bool | None = None
    # Someone pressed Stop in its thread: the task only says so and ends (storage/stops.py).
    stopped: bool = False
    # The trace of its message (a W3C traceparent, agent/core/tracing.py); None: not traced.
    traceparent: str | None = None
    # The schedule whose period this task runs (agent/core/schedules.py); None: a person's message.
    schedule_id: str | None = None
    # Who pressed Stop (the actor storage recorded, e.g. "slack:U123"); None: nobody.
    stopped_by: str | None = None
    # The later tasks of its session it answers too, oldest first (a thread that collects
    # its messages: storage/thread_queue.py); their turns are turns of its request.
    covers: tuple[str, ...] = ()
    # When this attempt's lease was taken, by the store's clock (None: not known); what
    # happened to the task since (an interrupt) is told apart from what came before by it.
    leased_at: datetime | None = None

    @property
    def user_message_id(self) -> str:
        return ids.user_message_id(self.id)

    @property
    def newest_turn_id(self) -> str:
        """The newest turn the task answers: its own, or that of the last task it covers.
        Its window reads up to it, and its reply is anchored after it."""
        return ids.user_message_id(self.covers[-1] if self.covers else self.id)

    @property
    def reply_id(self) -> str:
        return ids.reply_id(self.id)

    @property
    def failure_id(self) -> str:
        return ids.failure_id(self.id)

    @property
    def stopped_id(self) -> str:
        return ids.stopped_id(self.id)

    @property
    def interim_id(self) -> str:
        return ids.interim_id(self.id)

    def ack_id(self, round_number: int) -> str:
        return ids.ack_id(self.id, round_number)

    def is_own_ack(self, message_id: str) -> bool:
        """Whether `message_id` is one of this task's acknowledgments."""
        return message_id.startswith(ids.ack_prefix(self.id))


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message of a conversation. Ids are deterministic, so a retried append is a no-op."""

    id: str
    session_id: str
    role: Role
    kind: MessageKind
    text: str
    # Pictures shown with a user turn (stored with it, so later rounds see them again).
    images: tuple[Image, ...] = ()
    pinned: bool = field(default=False, compare=False)  # pinned in the conversation
    citations: tuple[Citation, ...] = ()  # a reply's sources (agent/core/citations.py)
    documents: tuple[Document, ...] = ()  # PDFs shown with a user turn, stored like pictures
    # What the host says of it (a picture not kept, the message deleted…), kept apart from
    # `text` and rendered after it (agent/core/notes.py): never part of a person's words.
    notes: tuple[RuntimeNote, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedPins:
    """Pinned messages the window has no room to show whole (storage/pins.py): the model
    is shown each by who wrote it and its first words (agent/rounds/prompt.py), newest
    first, and told when there are `more` than could be listed. No pin is left out unsaid."""

    messages: tuple[StoredMessage, ...] = ()
    more: bool = False

    def __bool__(self) -> bool:
        return bool(self.messages) or self.more


NO_LISTED_PINS = ListedPins()


@dataclass(frozen=True, slots=True)
class Window(Sequence[StoredMessage]):
    """A task's view of its conversation (`History.window`): messages oldest first.

    `complete` says that the budget left nothing out: every message up to the task's turn
    is shown, or covered by the summary shown first. A complete window has nothing to
    compact, so the runner does not ask (`agent.durable.compaction`); False is always a
    safe answer (compaction then reads what the window dropped, and finds it or not).
    `pins` are the pinned messages it lists rather than shows (`ListedPins`).
    """

    messages: tuple[StoredMessage, ...]
    complete: bool = False
    pins: ListedPins = NO_LISTED_PINS  # pinned, and only listed for room

    @overload
    def __getitem__(self, index: int) -> StoredMessage: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[StoredMessage]: ...

    def __getitem__(self, index: int | slice) -> StoredMessage | Sequence[StoredMessage]:
        return self.messages[index]

    def __len__(self) -> int:
        return len(self.messages)


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """How far a running call has come, as its tool says (an MCP server's progress
    notifications): `progress` so far, of `total` when the tool knows it, and its
    `message` — the tool's own words, for people to read, never for the model."""

    progress: float
    total: float | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One work-tool call of a round, as people watch it and operators read it later."""

    call_id: str
    name: str  # as offered to the model, e.g. "read_thread" or "github__search_issues"
    arguments: str  # the raw JSON the model wrote
    state: ToolCallState
    output: str = ""  # the result the model read (capped), or the error text; "" while running
    # The subtask type whose sub-agent made the call; None in the task's own rounds. A
    # sub-agent's calls are not the reply's: they never go on its timeline.
    subtask_type: str | None = None
    # Set on a "running" record told after the start: the call's progress as its tool
    # reported it. Only for showing; it is not the call's outcome and is never stored.
    progress: ToolProgress | None = None


class ToolObserver(Protocol):
    """Watches work-tool calls: the thread shows them, storage records them, metrics count."""

    async def tool_call(self, task: Task, record: ToolCallRecord) -> None:
        """Told when a work-tool call starts (state "running", no `progress`), each time
        its tool reports progress while it runs ("running" again, with `progress`), and
        when it ends ("ok" or "error"). What it raises is logged and ignored: watching never
        fails a tool."""


@dataclass(frozen=True, slots=True)
class Delivered:
    """Posts that are in the conversation but not yet recorded so: what a publish asked
    to leave that record to the task's end returns (`Publisher.publish(finishing=True)`),
    for `TaskQueue.finish` to record with the task's end, in one step instead of two.
    Each post is its id and where it shows (None: not known), as the publisher spells
    them; the agent only hands them on."""

    posts: tuple[tuple[str, str | None], ...] = ()


NOTHING_DELIVERED = Delivered()


class TaskQueue(Protocol):
    """Leased tasks: at most one running per session, oldest first.

    A lease can be lost while its worker runs (taken over after the process looked dead);
    `finish`, `fail` and `retry_later` of a lost lease change nothing, and so does every
    publish for it (see `Publisher`)."""

    async def claim(self) -> Task | None:
        """Lease the next runnable task, or None when there is none."""

    async def heartbeat(self, task: Task) -> bool:
        """Extend the lease; False when the lease was lost (to another worker, or because
        this process can no longer prove it is alive under the owner that took it)."""

    async def leases_in_doubt(self) -> None:
        """Return when every lease this process holds may just have been lost at once
        (its liveness signal dropped): its workers heartbeat then instead of at their next
        beat. Implementations that cannot lose leases that way never return."""

    async def cancelled(self, task: Task) -> bool:
        """Whether an operator cancelled the task (asked once its lease is found lost)."""

    async def interrupted(self, task: Task) -> bool:
        """Whether a new message of the person who asked ended this attempt's lease (a
        thread whose queue mode is `interrupt`), asked once its lease is found lost: the
        task is queued again to answer everything pending, not cancelled."""

    async def finish(self, task: Task, delivered: Delivered = NOTHING_DELIVERED) -> None:
        """End the task's lease as done, and record `delivered` (the posts its reply's
        publish left to the finish: `Publisher.publish(finishing=True)`) in the same step,
        whether or not the lease is still this attempt's: a post that landed, landed. What
        this makes runnable (the thread's next message) gets a worker woken for it, here
        or in another process."""

    async def fail(self, task: Task, reason: str) -> None:
        """End the task's lease as failed; what it makes runnable, as with `finish`."""

    def dropped_wakeups(self) -> int:
        """How many wake-ups (`wait_for_work`) found no worker to take them so far, the
        queue's bound on kept wake-ups reached: a count that grows while a worker runs a
        task means work was announced that no worker may look for, so it looks at once."""

    async def retry_later(self, task: Task, delay: float, reason: str) -> None: ...

    async def wait_for_work(self, max_wait: float) -> None:
        """Return when a task may have become runnable, or after `max_wait` seconds."""


@dataclass(frozen=True, slots=True)
class ModelWait:
    """What the store knows of a task that waits for the models: how many of its tries
    were asked for early (`early_tries`: by a new message in its thread, or by a model
    answering again), and whether its thread was told the models are unavailable since
    its message arrived (`thread_told`: an earlier task's give-up notice covers it)."""

    early_tries: int = 0
    thread_told: bool = False


class ModelWaits(Protocol):
    """Tasks waiting while every model is down (agent/durable/runner.py, "Every model
    down"), so that they can be tried at once when a model answers again or a new message
    arrives in their thread, and each thread is told once per outage."""

    async def standing(self, task: Task) -> ModelWait: ...

    async def defer(self, task: Task, delay: float, reason: str) -> None:
        """`TaskQueue.retry_later`, marking the task as waiting for the models."""

    async def told(self, task: Task) -> None:
        """The task's give-up notice (the models are unavailable) went to its thread."""


class History(Protocol):
    """A conversation's stored messages."""

    async def get(self, message_id: str) -> StoredMessage | None: ...

    async def append(
        self,
        message: StoredMessage,
        *,
        answers: str,
        origin: AnswerOrigin | None = None,
        lease: Task | None = None,
    ) -> StoredMessage:
        """Store `message` (answering the user message `answers`) unless its id exists,
        with where it came from (`origin`, as `Memory.stamp` records it); return the
        stored row either way, so a retry reuses what was stored first (and its origin).

        With `lease`, fenced like `Publisher.publish`: when that task's attempt is no
        longer its current lease, nothing is stored and an exception is raised (a later
        attempt may answer messages this one never saw); the runner then finds the lease
        lost and stops."""

    async def window(self, task: Task, *, max_chars: int, max_messages: int) -> Window:
        """The latest messages up to and including the task's own turn, oldest first,
        within the budget, and whether the budget left anything out. The task's turn is
        always included."""


@dataclass(frozen=True, slots=True)
class Step:
    """One piece of a task's work that people can watch: a subtask of a delegation, shown
    under its acknowledgment (for Slack: a task card of the message's plan)."""

    id: str
    title: str
    state: StepState
    detail: str = ""


class Publisher(Protocol):
    """Delivers the agent's text to the conversation, exactly once per message id."""

    async def publish(
        self,
        task: Task,
        message_id: str,
        text: str,
        *,
        steps: Sequence[Step] = (),
        citations: Sequence[Citation] = (),
        finishing: bool = False,
    ) -> Delivered:
        """Post `text` unless it was posted already; a reply's `citations` are shown with it. Fenced by the task's lease: when
        `task` (its attempt) is no longer the current lease, nothing is posted and an
        exception is raised; the runner then finds the lease lost and stops.

        `steps` are the work an acknowledgment announces (its subtasks, with their states
        as far as known); a publisher that can show them live does, and `LiveView.step`
        updates them later. Publishing an acknowledgment again once its steps are all
        settled completes it.

        With `finishing` (the task ends right after: `TaskQueue.finish`), a publisher may
        leave the record that its posts landed to that finish and return them. A crash
        between the two leaves them unrecorded, not unsent: the next attempt's publish
        finds each one (completes its open message again, or finds it in the thread) and
        posts nothing twice. Otherwise it returns `NOTHING_DELIVERED`."""

    def working(self, task: Task) -> AbstractAsyncContextManager[None]:
        """Show that the task is being worked on while the context lasts (and stop showing
        it after); failure to show it never fails the task."""


class Showing:
    """When a draft shows (`Draft.showing`): `count` goes up each time the draft starts
    to show — its first text appears, and again after a `discard`. A model stream asked
    for with it (`Model.request(showing=…)`) slows to its later pace once the count
    passes what it was at the request (gateway/models/transport.py)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def shown(self) -> None:
        """The draft started to show (called by the draft)."""
        self.count += 1


class Draft(Protocol):
    """A reply as the model writes it, shown while it is written (for Slack: a streamed
    message). Display only: whatever goes wrong showing it, the reply is still published
    through `Publisher.publish` under the same message id, which completes the draft or
    posts the reply as if there had been none. Neither method raises."""

    @property
    def showing(self) -> Showing:
        """Told each time this draft starts to show; the round's model requests watch it."""

    async def append(self, text: str) -> None:
        """Show `text` after what was shown so far."""

    async def discard(self) -> None:
        """What was shown is not the reply (the step turned out to be something else, or
        the attempt failed): take it away. The next `append` starts afresh."""


class LiveView(Protocol):
    """Shows a task's work as it happens. Everything here is display: it never raises, and
    a failure to show something never fails the task."""

    def draft(self, task: Task, message_id: str) -> Draft:
        """A draft of the message `message_id` (a reply), for one round."""

    async def step(self, task: Task, message_id: str, step: Step) -> None:
        """Update one step shown under the acknowledgment `message_id`."""


class ThreadReader(Protocol):
    """Reads the task's conversation where it lives (for Slack: the thread), for work tools."""

    async def read_thread(self, task: Task, *, limit: int) -> Sequence[str]:
        """The thread's messages, oldest first, at most `limit`, each as the model should
        read it: a person's message in the same unforgeable provenance form as the turns
        of the conversation (the agent does not parse it; a newline inside one message
        must not read as another message)."""


@dataclass(frozen=True, slots=True)
class ModelCharge:
    """One model response, as it is charged: the route that answered, its tokens as the
    provider reported them (`input_tokens` the whole prompt, cached and written parts
    included) and its cost in USD (None: the price table does not know the model)."""

    route: Route
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: Decimal | None = None


class UsageMeter(Protocol):
    """Counts what answering a message costs, durably (across rounds, subtasks, replicas)."""

    async def record(self, task: Task, charge: ModelCharge) -> int:
        """Charge one model response to the task (and to its user's, channel's and
        workspace's usage today); return the number of model requests the task has made
        so far."""


class AlertSink(Protocol):
    """Tells an operator that a credential or quota on the path to the model failed."""

    async def credential_failure(self, task: Task, error: Exception) -> bool:
        """Alert, at most once per failing credential per window. True when an operator was
        told, now or earlier in the window; False when nobody could be (no operator
        channel, or the alert could not be posted): the user's notice must not say so."""


@dataclass(frozen=True, slots=True)
class AlertTurn:
    """One failure of a kind, as the throttle counted it (`AlertThrottle.note`).

    `ours`: this failure opened the kind's window, so its alert is to be sent now, saying
    `suppressed` (the repeats of the window before that were not sent) and when failures
    of the kind were first and last seen. Otherwise it is a repeat inside the window,
    counted and not sent. `claim` names the window, to ask how its alert went."""

    key: str
    claim: str
    ours: bool
    first_seen: datetime
    last_seen: datetime
    suppressed: int = 0


class AlertThrottle(Protocol):
    """One operator alert per kind of failure per window, for every replica together (a
    kind: a refused credential on a route, an exhausted quota, Slack refusing a token)."""

    async def note(self, key: str, *, window_seconds: float, send_seconds: float) -> AlertTurn:
        """Count a failure of the kind `key`. It opens a new window (`ours`) unless one is
        open: opened less than `window_seconds` ago, and neither `failed` nor still being
        sent after `send_seconds` (its sender died)."""

    async def settle(self, turn: AlertTurn, outcome: AlertOutcome) -> None:
        """Record how the alert of the window `turn` opened went; a window opened again
        since is not changed."""

    async def outcome(self, turn: AlertTurn) -> AlertOutcome | None:
        """How the alert of `turn`'s window went; None while it is being sent."""


@dataclass(frozen=True, slots=True)
class PromptEpoch:
    """What a session's rounds are asked under, as one identity: the system prompt (`text`,
    and the `version` of the code that wrote it), what the model is offered with it (the
    tools, by `offer_hash` and, in the order the model sees them, `tools`) and the system
    prompts of its sub-agents (`subagents`, by subtask type). `hash` covers all of it.

    An epoch from before offers were recorded has no `offer_hash` (and its `hash` is its
    text's alone). `offer` is the offer itself as canonical JSON, for storing: an epoch
    read back from storage does not carry it (`offer_hash` stands for it)."""

    hash: str
    version: str
    text: str
    offer_hash: str | None = None
    tools: tuple[str, ...] = ()
    subagents: tuple[tuple[str, str], ...] = ()
    offer: str | None = field(default=None, compare=False, repr=False)

    def offers_as(self, other: PromptEpoch) -> bool:
        """Whether the model is offered the same under this epoch as under `other`."""
        return self.offer_hash == other.offer_hash

    def subagent_prompt(self, kind: str) -> str | None:
        """The system prompt of the sub-agent of subtask type `kind` (None: it has none)."""
        return next((text for name, text in self.subagents if name == kind), None)


# Why a session's epoch began (`Memory.pin_prompt`; storage/memory.py's docstring).
EpochReason: TypeAlias = Literal["start", "compaction", "reset", "offer_changed", "legacy"]


@dataclass(frozen=True, slots=True)
class AnswerOrigin:
    """Where a stored reply or acknowledgment came from: the prompt epoch it was asked
    under and the route (provider, model, slot) that answered."""

    prompt_epoch: str | None = None
    route: Route | None = None


@dataclass(frozen=True, slots=True)
class Summary:
    """A model-written summary of a session's older messages: those anchored from
    `covers_from` to `covers_to` (seqs of user turns)."""

    covers_from: int
    covers_to: int
    text: str


@dataclass(frozen=True, slots=True)
class Overflow:
    """What a task's window no longer shows: the messages older than the window (oldest
    first, the previous summary's text first when there is one) and the seqs they cover."""

    covers_from: int
    covers_to: int
    previous: str | None
    messages: Sequence[StoredMessage]


class Memory(Protocol):
    """What a session remembers beyond its window: the prompt epoch it is pinned to, and
    the origin of each answer and subtask result."""

    async def pin_prompt(self, session_id: str, current: PromptEpoch) -> PromptEpoch:
        """The session's epoch, text included: the one it is pinned to when that offers
        what `current` offers (`PromptEpoch.offers_as`); else `current`, stored once per
        hash and begun as the session's next epoch — `start` for its first, `reset` after
        an operator's reset, `offer_changed` when the pinned one offered something else."""

    async def stamp(self, message_id: str, origin: AnswerOrigin) -> None:
        """Record where a stored answer came from, unless that was recorded already."""

    async def stamp_subtask(
        self, task_id: str, round_number: int, index: int, attempt: int, epoch: str
    ) -> None:
        """Record the epoch (so the sub-agent prompt) the subtask's run `attempt` is asked
        under; a later attempt's stamp replaces it, an earlier one's changes nothing."""


class SummaryStore(Protocol):
    """Summaries of what no longer fits a session's window (compaction)."""

    async def overflow(
        self, task: Task, *, edge_id: str, max_chars: int, max_messages: int
    ) -> Overflow | None:
        """What the task's window no longer shows: the messages older than `edge_id` (the
        oldest the window shows) and newer than the latest summary, oldest first, whole
        turns only, at most `max_messages` and `max_chars` of them; None when there are
        none."""

    async def store_summary(self, session_id: str, summary: Summary, epoch: PromptEpoch) -> None:
        """Store a summary (idempotent per session and `covers_to`) and, in the same
        transaction, pin the session to `epoch` (the summary was written for the prompt of
        now): its current epoch restated when it is that one, else its next one begun
        (reason `compaction`)."""
