"""Slack's error codes, and what each means for us: one table, which every caller reads.

An `ok: false` answer names its cause in `error` (`channel_not_found`, `token_revoked`, …).
What follows from it is ours to say, and it must be said once: three lists of "our token is
dead" had drifted apart (the client's alarm, Socket Mode's start-up error and the
scheduler's pauses each heard a different set). `CODES` maps each code we act on to its
`Meaning` and to the words an operator reads; callers branch on the meaning
(`SlackRefused.meaning`, gateway/slack/errors.py), never on codes of their own:

    TOKEN_REFUSED      the client raises the token alarm, Socket Mode names SLACK_APP_TOKEN,
                       the scheduler pauses the schedule it was checking
    CONVERSATION_GONE  the scheduler pauses a schedule that posts there
    PERSON_GONE        the scheduler pauses a schedule that posts in their DM
    SLACK_FAILED       the call's outcome is unknown, not refused (gateway/slack/errors.py)
    RATE_LIMITED       a read may be asked again (`worth_rereading`)

A code not here means nothing in particular: its caller treats it as any refusal. The codes
are those of Slack's reference for the methods we call (auth.test, apps.connections.open,
conversations.info and .open, chat.*) where a code says the same for every method.
`tests/gateway/test_slack_codes.py` checks that each code is written here once and that no
other module lists one or compares Slack's error with one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final


class Meaning(enum.Enum):
    """What a Slack error code means for us (module docstring)."""

    TOKEN_REFUSED = "token refused"  # our token is dead, or the wrong kind: an operator acts
    CONVERSATION_GONE = "conversation gone"  # nothing can be posted there any more
    PERSON_GONE = "person gone"  # no DM can be opened with them any more
    SLACK_FAILED = "slack failed"  # on Slack's side: what was asked may have been done
    RATE_LIMITED = "rate limited"  # Slack asked us to slow down: later, it may be done


@dataclass(frozen=True, slots=True)
class Code:
    """One code's entry: its meaning, and what it says in an operator's words."""

    meaning: Meaning
    says: str


_TOKEN = Meaning.TOKEN_REFUSED
_CONVERSATION = Meaning.CONVERSATION_GONE
_PERSON = Meaning.PERSON_GONE
_FAILED = Meaning.SLACK_FAILED

CODES: Final[Mapping[str, Code]] = MappingProxyType(
    {
        "invalid_auth": Code(_TOKEN, "the token is not valid (wrong, or the app was uninstalled)"),
        "token_revoked": Code(_TOKEN, "the token was revoked (the app was uninstalled)"),
        "account_inactive": Code(_TOKEN, "the token is inactive (the app was uninstalled)"),
        "not_authed": Code(_TOKEN, "no token was sent"),
        "not_allowed_token_type": Code(
            _TOKEN, "the token is of the wrong type (a bot token xoxb-, or an app token xapp-)"
        ),
        "channel_not_found": Code(
            _CONVERSATION, "the channel was not found (deleted, or the bot was removed from it)"
        ),
        "is_archived": Code(_CONVERSATION, "the channel is archived"),
        "user_not_found": Code(_PERSON, "the person was not found"),
        "user_disabled": Code(_PERSON, "the person's account is deactivated"),
        "internal_error": Code(_FAILED, "Slack failed (what was asked may have been done)"),
        "fatal_error": Code(_FAILED, "Slack failed (part of what was asked may have been done)"),
        "service_unavailable": Code(_FAILED, "Slack is unavailable for a moment"),
        "request_timeout": Code(_FAILED, "Slack timed out reading the call"),
        "ratelimited": Code(Meaning.RATE_LIMITED, "Slack asked us to slow down"),
    }
)


def meaning_of(code: str) -> Meaning | None:
    """What Slack's error `code` means for us; None for a code that means nothing in
    particular."""
    entry = CODES.get(code)
    return None if entry is None else entry.meaning


def describe(code: str) -> str:
    """`code` in an operator's words, the code itself beside them: "the channel is archived
    (is_archived)"; a code not in the table stands alone."""
    entry = CODES.get(code)
    return code if entry is None else f"{entry.says} ({code})"
