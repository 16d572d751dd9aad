"""What the user reads in the thread when their message could not be answered.

A notice says what happened, in words a person in the channel can act on, and never
claims more than is true: "the operators have been alerted" only when an alert was
actually sent (or one for the same failure was sent within the alert window). The kinds:

    credential   a credential on the path to the model was refused, or the quota is spent
    unavailable  every model stayed down past the bound on deferrals: try again later
    time_limit   the task ran out of its time
    limit        the message used up its allowance of model requests
    error        anything else (a model that never answered properly, a bug)

Before an `unavailable` notice there is usually another one, `still_trying`: while every
model is down the person is told early that the bot keeps trying (agent.durable.runner
says when), and the answer or the `unavailable` notice follows it as a message of its
own. It is a message, not a status line, because a person notices a message (and Slack
clears a status line at the bot's next post); it is not a failure notice, so
`override` (one text for every failure) does not replace it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

FailureKind: TypeAlias = Literal["credential", "unavailable", "time_limit", "limit", "error"]


@dataclass(frozen=True, slots=True)
class FailureNotices:
    """The notice per kind of failure; `override` (one text for every kind) wins when set."""

    credential: str = (
        "Sorry, I couldn't answer this message: the AI service refused this bot's "
        "credentials. The operators have been alerted."
    )
    credential_unalerted: str = (
        "Sorry, I couldn't answer this message: the AI service refused this bot's "
        "credentials. Please tell the people who run this bot."
    )
    unavailable: str = (
        "Sorry, I couldn't answer this message: the AI models are unavailable right now. "
        "Please try again in a while."
    )
    time_limit: str = (
        "Sorry, I couldn't answer this message within its time limit. Please try again, "
        "perhaps with a narrower question."
    )
    limit: str = (
        "Sorry, I stopped working on this message: it used up its allowance of AI model "
        "requests. Please try again with a narrower question."
    )
    error: str = "Sorry, something went wrong and I couldn't answer this message."
    still_trying: str = (
        "The AI models are failing right now. I'm still trying, and I'll reply in this "
        "thread either way."
    )
    override: str | None = None

    def text(self, kind: FailureKind, *, alerted: bool = False) -> str:
        if self.override:
            return self.override
        if kind == "credential":
            return self.credential if alerted else self.credential_unalerted
        texts: dict[FailureKind, str] = {
            "unavailable": self.unavailable,
            "time_limit": self.time_limit,
            "limit": self.limit,
            "error": self.error,
        }
        return texts[kind]


DEFAULT_NOTICES = FailureNotices()
