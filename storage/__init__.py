"""threadgate's storage: Postgres behind the agent's ports, and the gatekeeper's admission.

This module is the package's public surface: what `gateway/` uses. Every name here
raises only `StorageError` and its subclasses; asyncpg's exceptions never leave the
package (`storage.errors.translate_errors`).
"""

from storage.admission import (
    LIMIT_SCOPES,
    REFUSALS,
    UNLIMITED,
    Admission,
    Admitted,
    BeforeDownloads,
    EarlierMessage,
    Limits,
    LimitScope,
    admit,
    before_downloads,
    session_exists,
)
from storage.alert_windows import PostgresAlertThrottle
from storage.approvals import (
    Decided,
    PendingApproval,
    PostgresApprovals,
    StoredApproval,
    approvals_of,
    decide_approval,
    pending_approval,
)
from storage.database import Database
from storage.delegations import PostgresDelegations
from storage.embedded import start_embedded_postgres
from storage.errors import DatabaseUnavailable, MigrationError, StorageError
from storage.feedback import (
    VOTES,
    FeedbackLine,
    Recorded,
    StoredVote,
    Vote,
    feedback_report,
    record_vote,
    votes_of,
)
from storage.history import DEFAULT_PINNED_MAX, PostgresHistory
from storage.inspection import (
    EPOCHS_SHOWN,
    TASK_STATES,
    EpochRecord,
    InterventionRecord,
    MessageRecord,
    PostRecord,
    RoundRecord,
    SubtaskRecord,
    TaskDetail,
    TaskFilter,
    TaskSummary,
    inspect_task,
    list_tasks,
)
from storage.installations import (
    InstallationSummary,
    PostgresInstallations,
    PostgresOAuthStates,
    StoredInstallation,
    cancel_workspace_tasks,
)
from storage.lifecycle import (
    TOMBSTONE,
    Deleted,
    delete_turn,
    revise_turn,
    stored_turn,
    stored_turn_text,
)
from storage.memory import PostgresMemory, SessionReset, UnknownSession, reset_session, slot_name
from storage.migrations import pending_migrations
from storage.outbox import Claim, Outbox, Superseded
from storage.outbox_states import (
    OUTBOX_STATES,
    ClaimAnswer,
    PostEvent,
    PostState,
    Settlement,
    StateRule,
)
from storage.pictures import (
    DEFAULT_THREAD_PICTURE_BYTES,
    DEFAULT_WORKSPACE_DAILY_PICTURE_BYTES,
    PictureBudgets,
)
from storage.pins import (
    Pinned,
    PinnedMessage,
    Unpinned,
    clear_pin,
    flag_pin,
    retain_pin,
    session_known,
)
from storage.pool import ConnectionPool
from storage.queue import (
    DEFAULT_LEASE_SECONDS,
    Intervention,
    InterventionRefused,
    PostgresTaskQueue,
    UnknownTask,
    cancel_task,
    retry_task,
)
from storage.retention import SEEN_EVENTS_KEPT, Retention, RetentionRun
from storage.stops import Stopped, ThreadStop, stop_thread
from storage.summaries import PostgresSummaries
from storage.token_cipher import TokenCipher, TokenKeyError, is_token_key
from storage.tool_calls import PostgresToolCalls, StoredToolCall, tool_calls_of
from storage.usage import PostgresUsageMeter, tokens_today
from storage.usage_report import USAGE_GROUPINGS, UsageGrouping, UsageLine, usage_report

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_PINNED_MAX",
    "DEFAULT_THREAD_PICTURE_BYTES",
    "DEFAULT_WORKSPACE_DAILY_PICTURE_BYTES",
    "EPOCHS_SHOWN",
    "LIMIT_SCOPES",
    "OUTBOX_STATES",
    "REFUSALS",
    "SEEN_EVENTS_KEPT",
    "TASK_STATES",
    "TOMBSTONE",
    "UNLIMITED",
    "USAGE_GROUPINGS",
    "VOTES",
    "Admission",
    "Admitted",
    "BeforeDownloads",
    "Claim",
    "ClaimAnswer",
    "ConnectionPool",
    "Database",
    "DatabaseUnavailable",
    "Decided",
    "Deleted",
    "EarlierMessage",
    "EpochRecord",
    "FeedbackLine",
    "InstallationSummary",
    "Intervention",
    "InterventionRecord",
    "InterventionRefused",
    "LimitScope",
    "Limits",
    "MessageRecord",
    "MigrationError",
    "Outbox",
    "PendingApproval",
    "PictureBudgets",
    "Pinned",
    "PinnedMessage",
    "PostEvent",
    "PostRecord",
    "PostState",
    "PostgresAlertThrottle",
    "PostgresApprovals",
    "PostgresDelegations",
    "PostgresHistory",
    "PostgresInstallations",
    "PostgresMemory",
    "PostgresOAuthStates",
    "PostgresSummaries",
    "PostgresTaskQueue",
    "PostgresToolCalls",
    "PostgresUsageMeter",
    "Recorded",
    "Retention",
    "RetentionRun",
    "RoundRecord",
    "SessionReset",
    "Settlement",
    "StateRule",
    "Stopped",
    "StorageError",
    "StoredApproval",
    "StoredInstallation",
    "StoredToolCall",
    "StoredVote",
    "SubtaskRecord",
    "Superseded",
    "TaskDetail",
    "TaskFilter",
    "TaskSummary",
    "ThreadStop",
    "TokenCipher",
    "TokenKeyError",
    "UnknownSession",
    "UnknownTask",
    "Unpinned",
    "UsageGrouping",
    "UsageLine",
    "Vote",
    "admit",
    "approvals_of",
    "before_downloads",
    "cancel_task",
    "cancel_workspace_tasks",
    "clear_pin",
    "decide_approval",
    "delete_turn",
    "feedback_report",
    "flag_pin",
    "inspect_task",
    "is_token_key",
    "list_tasks",
    "pending_approval",
    "pending_migrations",
    "record_vote",
    "reset_session",
    "retain_pin",
    "retry_task",
    "revise_turn",
    "session_exists",
    "session_known",
    "slot_name",
    "start_embedded_postgres",
    "stop_thread",
    "stored_turn",
    "stored_turn_text",
    "tokens_today",
    "tool_calls_of",
    "usage_report",
    "votes_of",
]
