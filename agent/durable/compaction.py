"""Compaction: what outgrows a thread's window is summarized, not dropped (issue 12).

Before a task's first round, the runner hands its window to `Compaction`, unless the
window is complete (`agent.Window`: the budget left nothing out, as in most threads, and
there is nothing to read). If the session has messages the window no longer shows (older
than its oldest message, newer than the latest summary; `agent.SummaryStore.overflow`),
the model is asked once, through the same attempt ladder and usage meter as rounds
(`ModelResponder.ask_text`), to summarize them together with the previous summary and the
older part of the window itself (all but the newest `keep_chars`, so that the next
compaction is due only once that much more has been said, not at every message); the new
summary is stored covering all of it, and the next windows show it first, then pinned
messages, then the newest messages after it.

The request is bounded whatever the thread's length: at most the history's character
budget of dropped messages (whole turns, oldest first; what does not fit is summarized by
a later task) and the previous summary, itself capped. Its prompt is short and its own:
the turns reach the model framed as data (`agent.rounds.framing`), turn tags intact, and
the previous summary and our replies with theirs escaped: only people's turns are turns.

A compaction also re-pins the session to this deployment's epoch (the summary is written
now, for the prompt of now) — its channel's, when `epoch` is a function of the task
(`ModelResponder.epoch_of`). When that is the session's epoch already (the common case:
nothing was deployed), the compaction restates it and numbers none; otherwise the session
begins its next epoch, reason `compaction`. The summary and the re-pin are one transaction
(`SummaryStore.store_summary`): a crash between them cannot leave a summary read under an
epoch it was not written for.

Nothing here may fail a task. A summary that cannot be had (models down, a refusal, past
its time limit) is logged and counted as `failed`, and the window drops the old turns as
it would without compaction. A lease lost meanwhile cancels it like any other step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from agent.core.ports import (
    Overflow,
    PromptEpoch,
    StoredMessage,
    Summary,
    SummaryStore,
    Task,
)
from agent.core.text import neutralize_turns, storable_text
from agent.models.contract import ModelMessage, SystemMessage, UserMessage
from agent.rounds.framing import DATA_RULE, frame_output

log = logging.getLogger(__name__)

SUMMARY_SOURCE = "earlier conversation"

_PROMPT = """\
You keep the memory of a long conversation in a Slack workspace, between people and an \
assistant. The part of it that no longer fits in view is below: the previous summary, if \
there is one, and the messages after it. Write one summary that replaces both, for the \
assistant to read before the rest of the conversation: what was asked and by whom (their \
`id` and name, as the turn tags give them), what was answered or decided, facts, numbers, \
names, links and open questions worth keeping. Short paragraphs or bullet points, at most \
{words} words. Write only the summary.

{rule}
"""


class TextAsker(Protocol):
    """Asks the model for text through the attempt ladder, charged to the task."""

    def __call__(
        self, task: Task, messages: Sequence[ModelMessage], *, max_output_tokens: int
    ) -> Awaitable[str]: ...


# The history budget: the characters of a thread the model sees in a round (the runner's
# window), and so the dropped characters one summary request reads.
DEFAULT_HISTORY_CHARS = 24_000


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    max_chars: int = DEFAULT_HISTORY_CHARS  # dropped messages per summary request
    max_messages: int = 200  # and their count
    summary_chars: int = 4_000  # the longest summary kept
    # What a compaction leaves in view: the newest turns within this many characters, so
    # the next one comes only once that much more has been said (not at every message).
    keep_chars: int = DEFAULT_HISTORY_CHARS // 2
    timeout_seconds: float = 120.0


class Compaction:
    """Summarizes what a task's window no longer shows; see the module docstring."""

    def __init__(
        self,
        store: SummaryStore,
        ask: TextAsker,
        *,
        epoch: PromptEpoch | Callable[[Task], PromptEpoch],
        settings: CompactionSettings = CompactionSettings(),
        observe: Callable[[str], None] = lambda outcome: None,
    ) -> None:
        self._store = store
        self._ask = ask
        self._epoch = epoch
        self._settings = settings
        self._observe = observe

    async def __call__(self, task: Task, window: Sequence[StoredMessage]) -> bool:
        """Summarize what `window` (the task's, as the runner shows it) leaves out; True
        when a summary was stored (the window is then worth reading again)."""
        s = self._settings
        shown = [m for m in window if m.kind != "summary" and not m.pinned]
        edge = keep_edge(shown, s.keep_chars)
        if edge is None:
            return False
        overflow = await self._store.overflow(
            task, edge_id=edge.id, max_chars=s.max_chars, max_messages=s.max_messages
        )
        seen = {m.id for m in shown}
        if overflow is None or all(m.id in seen for m in overflow.messages):
            return False  # the window drops nothing yet
        text = await self._summary(task, overflow)
        if text is None:
            return False
        summary = Summary(overflow.covers_from, overflow.covers_to, text)
        epoch = self._epoch if isinstance(self._epoch, PromptEpoch) else self._epoch(task)
        await self._store.store_summary(task.session_id, summary, epoch)
        self._observe("summarized")
        return True

    async def _summary(self, task: Task, overflow: Overflow) -> str | None:
        s = self._settings
        try:
            async with asyncio.timeout(s.timeout_seconds):
                text = await self._ask(
                    task,
                    summary_messages(overflow, s.summary_chars),
                    max_output_tokens=s.summary_chars // 3,
                )
        except Exception as exc:  # whatever it was, the old turns are dropped as before
            log.warning("task %s: the conversation could not be summarized: %s", task.id, exc)
            self._observe("failed")
            return None
        return storable_text(text.strip())[: s.summary_chars] or None


def keep_edge(shown: Sequence[StoredMessage], keep_chars: int) -> StoredMessage | None:
    """The oldest person's turn among the newest `shown` messages within `keep_chars` (the
    last message, the task's turn, at least): a compaction summarizes what is before it."""
    if not shown:
        return None
    edge, used = shown[-1], 0
    for message in reversed(shown):
        used += len(message.text)
        if used > keep_chars:
            break
        if message.role == "user":
            edge = message
    return edge


def summary_messages(overflow: Overflow, summary_chars: int) -> list[ModelMessage]:
    """The summarizer's request: its prompt, then the overflow framed as data."""
    words = max(50, summary_chars // 7)
    previous = neutralize_turns(overflow.previous) if overflow.previous else ""
    parts = [f"Previous summary:\n{previous}"] if previous else []
    parts += [_line(m) for m in overflow.messages]
    return [
        SystemMessage(_PROMPT.format(words=words, rule=DATA_RULE)),
        UserMessage(frame_output(SUMMARY_SOURCE, "\n\n".join(parts), keep_turns=True)),
    ]


def _line(message: StoredMessage) -> str:
    """A person's turn as stored (in its turn tag); the assistant's words labelled, their
    turn tags escaped."""
    if message.kind == "turn":
        return message.text
    text = neutralize_turns(message.text)
    return text if message.role == "user" else f"assistant: {text}"
