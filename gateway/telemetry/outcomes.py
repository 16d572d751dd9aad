"""One log line per message outcome, so "why does the bot ignore #support?" is answered
from the logs alone.

Each line says what became of a message and, for a refusal, why, in words that name the
setting behind it; it carries the work's bound fields (task, event, team, channel,
thread) and, in JSON logs, `outcome` and `reason` as fields of their own:

- `admitted`: the gatekeeper stored the message and its task (gateway/inbound/gatekeeper.py);
- `refused`: not answered, and why (`REASONS`): an allowlist, a bot
  (gateway/inbound/bots.py), a limit or budget (its scope), Slack Connect;
- `answered`, `deferred` (no model answered: tried again later), `stopped`, `interrupted`
  (the asker wrote again: answered with everything pending): the task runner's
  settlements, heard through `agent.RunnerObserver` (`TaskOutcomes`);
- `given_up`: the runner's own warning (agent/durable/runner.py), with the same fields.

Refusals and settlements are at INFO, give-ups at WARNING. What would be a line per
message of every channel the bot sits in stays at DEBUG: a refused message that does not
address the bot (no mention, not a DM), a duplicate delivery; a message kept as context
only is not logged at all.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from agent import RunnerObserver, bind_log_fields

log = logging.getLogger(__name__)

_LIMITS = "(or its channel's `limits` in THREADGATE_CHANNEL_CONFIG)"

# Why a message was not answered, by reason: the allowlists', the bots' and the
# admission's (every `storage.LIMIT_SCOPES`, checked by tests/gateway/test_outcome_logs.py).
REASONS: Mapping[str, str] = {
    "channel_not_allowed": "its channel is not in THREADGATE_ALLOWED_CHANNELS",
    "user_not_allowed": "its author is not in THREADGATE_ALLOWED_USERS",
    "bot_not_allowed": (
        "its author is a bot that THREADGATE_ALLOW_BOTS does not allow (no bot, by default)"
    ),
    "bot_loop": (
        "its thread had the most bot turns THREADGATE_BOT_TURNS_PER_THREAD allows (loop guard)"
    ),
    "user": f"its author sent THREADGATE_USER_MESSAGES_PER_HOUR messages this hour {_LIMITS}",
    "thread": f"its thread had THREADGATE_THREAD_MESSAGES_PER_HOUR messages this hour {_LIMITS}",
    "user_tokens": f"its author used up today's THREADGATE_USER_DAILY_TOKENS {_LIMITS}",
    "channel_tokens": f"its channel used up today's THREADGATE_CHANNEL_DAILY_TOKENS {_LIMITS}",
    "all_tokens": "every workspace together used up today's THREADGATE_DAILY_TOKENS_ALL_WORKSPACES",
    "channel_spend": f"its channel used up today's THREADGATE_CHANNEL_DAILY_SPEND_USD {_LIMITS}",
    "workspace_spend": "its workspace used up today's THREADGATE_WORKSPACE_DAILY_SPEND_USD",
    "external": (
        "its channel is shared with another organization (Slack Connect), which the"
        " channel's `external` rule in THREADGATE_CHANNEL_CONFIG refuses (the default)"
    ),
    "unverified": (
        "whether its channel is shared with another organization (Slack Connect) could"
        " not be checked (conversations.info), and such channels are refused"
    ),
}


def admitted() -> None:
    """The message and its task are stored: it will be answered."""
    with bind_log_fields(outcome="admitted"):
        log.info("message admitted: its task is queued")


def refused(reason: str, *, addressed: bool = True) -> None:
    """The message is not answered, for `reason` (a key of `REASONS`); at DEBUG when it
    did not address the bot."""
    level = logging.INFO if addressed else logging.DEBUG
    with bind_log_fields(outcome="refused", reason=reason):
        log.log(level, "message not answered (%s): %s", reason, REASONS.get(reason, reason))


def duplicate() -> None:
    with bind_log_fields(outcome="duplicate"):
        log.debug("message delivered again: it has its task already")


# The runner's settlements worth a line of their own; the others have the runner's own
# line (a give-up, a lost lease, a cancel, a schedule's silent run) or are not an outcome
# of the message (`error`: retried, or given up with its line).
_SETTLED: Mapping[str, str] = {
    "answered": "task answered: its reply is posted",
    "deferred": "task deferred: no model answered; it is tried again later",
    "stopped": "task stopped: someone pressed Stop; the note is posted",
    "interrupted": (
        "task interrupted: its asker wrote again (THREADGATE_THREAD_QUEUE=interrupt);"
        " it is answered with everything pending"
    ),
}


class TaskOutcomes:
    """`agent.RunnerObserver` that logs a task's settlement (`_SETTLED`) and tells
    `inner` (the metrics, when there are any) everything it hears."""

    def __init__(self, inner: RunnerObserver | None) -> None:
        self._inner = inner

    def task_settled(self, outcome: str) -> None:
        if self._inner is not None:
            self._inner.task_settled(outcome)
        line = _SETTLED.get(outcome)
        if line is not None:
            with bind_log_fields(outcome=outcome):
                log.info(line)

    def round_decided(self, decision: str) -> None:
        if self._inner is not None:
            self._inner.round_decided(decision)

    def subtask_settled(self, state: str) -> None:
        if self._inner is not None:
            self._inner.subtask_settled(state)

    def schedule_run_settled(self, outcome: str) -> None:
        if self._inner is not None:
            self._inner.schedule_run_settled(outcome)

    def reply_answered(self, messages: int) -> None:
        if self._inner is not None:
            self._inner.reply_answered(messages)
