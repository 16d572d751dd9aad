"""threadgate's storage: Postgres behind the agent's ports, and the gatekeeper's admission.

This module is the package's public surface: what `gateway/` uses. Every name here
raises only `StorageError` and its subclasses; asyncpg's exceptions never leave the
package (`storage.errors.translate_errors`).
"""

from storage.admission import (
    LIMIT_SCOPES,
    UNLIMITED,
    Admission,
    Admitted,
    EarlierMessage,
    Limits,
    LimitScope,
    admit,
    session_exists,
)
from storage.database import Database
from storage.delegations import PostgresDelegations
from storage.embedded import start_embedded_postgres
from storage.errors import DatabaseUnavailable, MigrationError, StorageError
from storage.history import PostgresHistory
from storage.inspection import (
    TASK_STATES,
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
from storage.migrations import pending_migrations
from storage.outbox import Claim, Outbox, Superseded
from storage.queue import (
    Intervention,
    InterventionRefused,
    PostgresTaskQueue,
    UnknownTask,
    cancel_task,
    retry_task,
)
from storage.token_cipher import TokenCipher, TokenKeyError, is_token_key
from storage.tool_calls import PostgresToolCalls, StoredToolCall, tool_calls_of
from storage.usage import PostgresUsageMeter, tokens_today

__all__ = [
    "LIMIT_SCOPES",
    "TASK_STATES",
    "UNLIMITED",
    "Admission",
    "Admitted",
    "Claim",
    "Database",
    "DatabaseUnavailable",
    "EarlierMessage",
    "InstallationSummary",
    "Intervention",
    "InterventionRecord",
    "InterventionRefused",
    "LimitScope",
    "Limits",
    "MessageRecord",
    "MigrationError",
    "Outbox",
    "PostRecord",
    "PostgresDelegations",
    "PostgresHistory",
    "PostgresInstallations",
    "PostgresOAuthStates",
    "PostgresTaskQueue",
    "PostgresToolCalls",
    "PostgresUsageMeter",
    "RoundRecord",
    "StorageError",
    "StoredInstallation",
    "StoredToolCall",
    "SubtaskRecord",
    "Superseded",
    "TaskDetail",
    "TaskFilter",
    "TaskSummary",
    "TokenCipher",
    "TokenKeyError",
    "UnknownTask",
    "admit",
    "cancel_task",
    "cancel_workspace_tasks",
    "inspect_task",
    "is_token_key",
    "list_tasks",
    "pending_migrations",
    "retry_task",
    "session_exists",
    "start_embedded_postgres",
    "tokens_today",
    "tool_calls_of",
]
