"""The gatekeeper: from an inbound Slack message to a durable, provenance-tagged task.

It decides whether the message is ours to answer (allowlists; a thread reply without a
mention only where the bot already takes part), resolves display names, turns Slack markup
into plain text (with a note on attached files, which are not read yet), wraps it in a
`<turn>` tag and admits it in one transaction — together with the thread's earlier
messages when the bot is first mentioned inside an existing thread. The caller acks Slack
only after `admit` returns: an acked event is never lost.
Everything before the ack shares one time budget (`lookup_budget_seconds`, well under
Slack's 3 s): the names of the turn and the back-fill run at once, each lookup ends at the
budget's deadline, and what did not arrive by then is done without — a user id stands in
for a name, and a back-fill keeps the newest messages it has. A slow Slack delays the ack
by at most the budget, never into Slack's retry.

The guard rails against abuse and cost (`Limits`: messages per user and per thread per
hour, tokens per user and per channel per day) are enforced in the admission statement
itself, so every replica counts the same rows. An over-limit message is `limited`: acked,
nothing queued; the first of its window is answered by one polite notice (posted by a
worker after the ack, never here). The thread limit is also the loop breaker: an
integration that answers every bot post in a thread runs into it, gets one notice and
then no more posts to answer.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from agent import bind_log_fields
from gateway.inbound import InboundTurn, SharedFile
from gateway.markup import clean_text, mentioned_user_ids
from gateway.threads import ThreadMessage, render_message
from gateway.users import NameDirectory
from storage import (
    UNLIMITED,
    Admission,
    Database,
    EarlierMessage,
    Limits,
    LimitScope,
    admit,
    session_exists,
)

Outcome: TypeAlias = Literal["admitted", "duplicate", "ignored", "limited"]

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

    allowed_channels: frozenset[str] = frozenset()
    allowed_users: frozenset[str] = frozenset()
    continue_threads: bool = True
    backfill_messages: int = 50

    def allows(self, inbound: InboundTurn) -> bool:
        if self.allowed_users and inbound.user not in self.allowed_users:
            return False
        # DMs are not channels anyone configures; the user allowlist covers them.
        return (
            inbound.direct or not self.allowed_channels or inbound.channel in self.allowed_channels
        )

    def addressed(self, inbound: InboundTurn, *, known: bool) -> bool:
        """Whether the message asks the bot: a mention, a DM, or (continuing threads) a reply
        in a thread the bot takes part in (`known`)."""
        return inbound.mentioned or inbound.direct or (known and self.continue_threads)


class Gatekeeper:
    def __init__(
        self,
        db: Database,
        users: NameDirectory,
        *,
        threads: ThreadSource | None = None,
        policy: Policy = Policy(),
        lookup_budget_seconds: float = 1.5,
        limits: Limits = UNLIMITED,
        on_limited: Callable[[LimitScope], None] | None = None,
    ) -> None:
        self._limits = limits
        self._on_limited = on_limited or (lambda scope: None)
        self._db = db
        self._users = users
        self._threads = threads
        self._policy = policy
        self._budget = lookup_budget_seconds

    async def admit(
        self, inbound: InboundTurn, *, bot_user_id: str | None, enterprise_id: str | None = None
    ) -> Outcome:
        """Store the turn and its task (durable when this returns), or say why not.
        `enterprise_id` (Enterprise Grid) goes into the task's address beside its team."""
        where = {
            "team": inbound.team,
            "channel": inbound.channel,
            "thread_ts": inbound.reply_thread_ts,
        }
        with bind_log_fields(task=inbound.task_id, event=inbound.event_id, **where):
            return await self._admit(inbound, bot_user_id, enterprise_id)

    async def _admit(
        self, inbound: InboundTurn, bot_user_id: str | None, enterprise_id: str | None = None
    ) -> Outcome:
        if not self._policy.allows(inbound):
            return "ignored"
        # Only a message inside a thread asks whether we know the conversation (to continue
        # it without a mention, or to back-fill it); a top-level one saves the round trip.
        known = bool(inbound.thread_ts) and await session_exists(self._db, inbound.session_id)
        if not self._policy.addressed(inbound, known=known):
            return "ignored"
        deadline = asyncio.get_running_loop().time() + self._budget
        backfill = not known and bool(inbound.thread_ts)
        turn_text, earlier = await asyncio.gather(
            self.render(inbound, bot_user_id=bot_user_id, deadline=deadline),
            self._backfill(inbound, bot_user_id, deadline) if backfill else _nothing(),
        )
        admission = Admission(
            event_id=inbound.event_id,
            task_id=inbound.task_id,
            session_id=inbound.session_id,
            address={
                "team": inbound.team,
                "channel": inbound.channel,
                "thread_ts": inbound.reply_thread_ts,
                # The recipient Slack requires for a streamed reply outside DMs.
                "user": inbound.user,
                # Which installation's token serves the task (gateway/workspaces.py).
                **({"enterprise": enterprise_id} if enterprise_id else {}),
            },
            turn_text=turn_text,
            earlier=earlier,
            user=f"{inbound.team}:{inbound.user}",
            channel=f"{inbound.team}:{inbound.channel}",
        )
        outcome = await admit(self._db, admission, self._limits)
        if outcome.limited is not None:
            self._on_limited(outcome.limited)
            return "limited"
        return "admitted" if outcome else "duplicate"

    async def render(
        self, inbound: InboundTurn, *, bot_user_id: str | None, deadline: float | None = None
    ) -> str:
        names = await self._names([inbound.user, *mentioned_user_ids(inbound.text)], deadline)
        return render_inbound(inbound, names, bot_user_id=bot_user_id)

    async def _backfill(
        self, inbound: InboundTurn, bot_user_id: str | None, deadline: float
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
        names = await self._names(
            sorted(
                {m.user for m in before} | {u for m in before for u in mentioned_user_ids(m.text)}
            ),
            deadline,
        )
        return tuple(
            EarlierMessage(
                f"slack:{inbound.team}:{inbound.channel}:{m.ts}",
                render_message(m, inbound.channel, names, bot_user_id=bot_user_id),
            )
            for m in before
        )

    async def _names(self, user_ids: list[str], deadline: float | None) -> dict[str, str]:
        try:
            async with asyncio.timeout_at(deadline):
                return await self._users.names(user_ids)
        except TimeoutError:
            return {}  # the ids stand in: a name is decoration, the id is the identity


async def _nothing() -> Sequence[EarlierMessage]:
    return ()


def render_inbound(inbound: InboundTurn, names: dict[str, str], *, bot_user_id: str | None) -> str:
    """The message as the model will read it: its text, and what is known of its files,
    in one provenance tag."""
    message = ThreadMessage(inbound.user, inbound.text, inbound.ts)
    note = files_note(inbound.files, inbound.files_not_described)
    return render_message(message, inbound.channel, names, bot_user_id=bot_user_id, note=note)


# A file name is the sender's text; one longer than this is cut (Slack allows 255 bytes).
MAX_FILE_NAME = 255
# A type as Slack writes it ("application/pdf", "pdf", "Plain Text"); anything else is
# not shown, since it is not quoted like a name is.
_FILE_KIND = re.compile(r"[\w .+/-]{1,100}")


def files_note(files: Sequence[SharedFile], more: int = 0) -> str:
    """What the model is told about attached files until it can read them: which files
    (name, type, size) and that they were not read, so the reply can say so. Names are
    quoted as JSON strings, so no name can end the list or pass for another file; the
    provenance tag escapes the whole note with the body."""
    count = len(files) + more
    if not count:
        return ""
    described = [_describe(f) for f in files] + ([f"{more} more"] if more else [])
    which = "1 file" if count == 1 else f"{count} files"
    its = "its" if count == 1 else "their"
    return f"[{which} attached, not read (you cannot see {its} content): {'; '.join(described)}]"


def _describe(shared: SharedFile) -> str:
    name = (
        json.dumps(clean_text(shared.name[:MAX_FILE_NAME]), ensure_ascii=False)
        if shared.name
        else "a file without a name"
    )
    kind = shared.kind if shared.kind and _FILE_KIND.fullmatch(shared.kind) else None
    details = [kind or "type unknown"]
    if shared.size is not None:
        details.append(f"{shared.size:,} bytes")
    return f"{name} ({', '.join(details)})"


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, fraction = ts.partition(".")
    return int(seconds or 0), int(fraction.ljust(6, "0")[:6] or 0)
