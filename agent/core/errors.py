"""What can go wrong in the agent, as types.

    ConfigError                   a setting is missing or wrong: a usage mistake, found before
                                  anything runs, so it is not an AgentError (nothing failed)
    InvalidSchedule               a schedule's period, cron expression, time zone or time is
                                  written wrongly: one sentence saying how to write it
    └── ScheduleRefused           a schedule the person may not have now (a cap is reached):
                                  one sentence saying why, for the model to relay

    AgentError                    a run-time failure of the agent
    ├── ControlCallError          a control tool was called wrongly; the message is for the model
    ├── ToolFailed                a work tool's service said no or is out of reach (an MCP
    │                             server's error): an outcome the model reads, not our bug
    ├── RoundFailed               the model never ended the round properly within the repair bound
    ├── SubtaskFailed             a subtask could not produce a result; the message is for the model
    ├── TaskTimedOut              the task ran out of its wall-clock time limit
    ├── ModelBudgetExceeded       the task used up its allowance of model requests
    ├── ModelError                a model call failed; carries the route that failed
    │   ├── TransientModelError   timeouts, connection errors, 408/409/429, 5xx, 529, cut streams
    │   │   └── StreamInterrupted a stream ended early; keeps the text received so far
    │   ├── NonTransientModelError 400, 404, 413, malformed answers: another model may do better
    │   │   └── AttachmentRefused a 400 about a picture or document the request carried
    │   ├── CredentialRejected    401/403: `source` says which authority refused
    │   └── QuotaExhausted        the account is out of credit (OpenAI `insufficient_quota`)
    └── ModelsUnavailable         every slot stayed transiently down: try the task again later

Messages never carry a secret: errors are built from statuses and vendor error *codes*,
never from request headers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from agent.core.documents import Document
from agent.core.images import Image

CredentialSource: TypeAlias = Literal["provider", "gateway", "unknown"]


@dataclass(frozen=True, slots=True)
class Route:
    """Which model a call went to: `provider:model`, the route at index `slot` of the
    fallback chain (0 the primary, 1 the first fallback, …). `credential` names the
    setting that holds the route's key (e.g. `OPENAI_API_KEY`; "" for the vendor's
    usual one): what an operator is told to check, and what keeps two routes to one
    model with different keys apart in the circuit."""

    provider: str
    model: str
    slot: int = 0
    credential: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.provider}:{self.model} (slot {self.slot})"


class ConfigError(Exception):
    """A setting is missing or malformed. The message names the variable and what to put there.

    A usage mistake, not a run-time failure: code that handles `AgentError` (a task that
    failed) must never swallow it.
    """


class InvalidSchedule(ValueError):
    """A schedule written wrongly (agent/core/recurrence.py): a usage mistake, whose message
    says how to write it, for a person at the command line or for the model."""


class ScheduleRefused(InvalidSchedule):
    """A schedule written rightly that the person may not have now: they have as many as
    they may (or their channel has). The message says why, for the model to relay."""


class AgentError(Exception):
    """Base of every run-time failure the agent raises on purpose."""


class ControlCallError(AgentError):
    """A control tool call the round rejected. The message is written for the model."""


class ToolFailed(AgentError):
    """A work tool failed for a reason of its own world — the service it calls answered
    with an error, or cannot be reached — not through a bug of ours. The message is for the
    model (it reads it as the tool's result); the log gets it as one line, without a
    traceback, naming `source` (e.g. which MCP server and tool) when the tool gives one.
    Plugins raise it for the same kind of failure."""

    def __init__(self, message: str, *, source: str = "") -> None:
        super().__init__(message)
        self.source = source


class RoundFailed(AgentError):
    """The model kept answering without a valid control call until the repair bound ran out."""


class ModelError(AgentError):
    """A model call failed.

    `from_circuit` is True when the call was not made at all because the route's circuit is
    open after an earlier credential or quota failure (see `agent.models.circuit`).
    """

    from_circuit: bool = False

    def __init__(
        self, message: str, *, route: Route | None = None, status_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.route = route
        self.status_code = status_code


class TransientModelError(ModelError):
    """Worth retrying the same model, after `retry_after` seconds when the server said so."""

    def __init__(
        self,
        message: str,
        *,
        route: Route | None = None,
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, route=route, status_code=status_code)
        self.retry_after = retry_after


class StreamInterrupted(TransientModelError):
    """The stream ended before the model finished (connection cut, error event mid-stream)."""

    def __init__(
        self,
        message: str,
        *,
        partial_text: str = "",
        route: Route | None = None,
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, route=route, status_code=status_code, retry_after=retry_after)
        self.partial_text = partial_text


class NonTransientModelError(ModelError):
    """Retrying this model will not help; the next model slot might."""


AttachmentKind: TypeAlias = Literal["picture", "document"]


class AttachmentRefused(NonTransientModelError):
    """The provider refused a picture or a document of the request (a 400 that says so).

    `scope` is `model` when the model takes no attachments of that `kind` at all, and
    `attachment` when it refused one: `path` is where the vendor said it was in the
    request body (message and content indexes), when it said; `attachment` is the one
    that was, once the model that sent the request has placed it (None: not known). The
    reason is ours ("it is too large", "it could not be read"), never the vendor's text."""

    def __init__(
        self,
        message: str,
        *,
        kind: AttachmentKind,
        scope: Literal["model", "attachment"],
        reason: str,
        path: tuple[int, ...] | None = None,
        route: Route | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message, route=route, status_code=status_code)
        self.kind: AttachmentKind = kind
        self.scope = scope
        self.reason = reason
        self.path = path
        # The attachment refused, once the model that sent it has placed `path`.
        self.attachment: Image | Document | None = None


class CredentialRejected(ModelError):
    """A credential on the path to the model was refused. Stop: no retry, no fallback."""

    def __init__(
        self,
        message: str,
        *,
        source: CredentialSource,
        route: Route | None = None,
        status_code: int | None = None,
    ) -> None:
        super().__init__(message, route=route, status_code=status_code)
        self.source: CredentialSource = source


class QuotaExhausted(ModelError):
    """The provider account has no quota left. Stop and tell the operator, like a credential."""


class ModelsUnavailable(AgentError):
    """Every model slot failed transiently past the retry bound; the task should run later."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SubtaskFailed(AgentError):
    """A subtask could not produce a result. The message is written for the model."""


class TaskTimedOut(AgentError):
    """The task ran past its wall-clock limit (counted from its message's arrival)."""


class ModelBudgetExceeded(AgentError):
    """The task made as many model requests as one message may cost (across its rounds and
    subtasks). Not a `ModelError`: no other model slot is tried, the task ends."""
