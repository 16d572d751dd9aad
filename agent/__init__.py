"""threadgate's agent: the round loop, control and work tools, subtasks, and the model layer.

The package is in four layers; each imports only the ones below it:

    agent.durable   durable work: the task runner, the model responder, background tasks
    agent.rounds    one round: the loop, control tools, prompt, work tools, subtask types
    agent.models    the model layer: the contract, providers, the attempt ladder, circuit
    agent.core      what every layer shares: errors, ports, delegation records, log fields

This module is the package's public surface: what `gateway/`, `storage/` and plugin
authors use. Everything not re-exported here is an implementation detail and may change.
"""

from agent.core.citations import Citation
from agent.core.delegation import (
    Delegation,
    DelegationStore,
    RoundInput,
    RoundRecord,
    RoundState,
    Subtask,
    SubtaskOutcome,
    SubtaskRequest,
    SubtaskState,
)
from agent.core.errors import (
    AgentError,
    ConfigError,
    ControlCallError,
    CredentialRejected,
    CredentialSource,
    ModelBudgetExceeded,
    ModelError,
    ModelsUnavailable,
    NonTransientModelError,
    QuotaExhausted,
    RoundFailed,
    Route,
    StreamInterrupted,
    SubtaskFailed,
    TaskTimedOut,
    TransientModelError,
)
from agent.core.ids import reply_id, user_message_id
from agent.core.images import MAX_IMAGES_PER_REQUEST, Image
from agent.core.log_context import bind_log_fields, log_fields
from agent.core.ports import (
    AlertSink,
    AnswerOrigin,
    Draft,
    History,
    LiveView,
    Memory,
    Overflow,
    PromptEpoch,
    Publisher,
    Step,
    StepState,
    StoredMessage,
    Summary,
    SummaryStore,
    Task,
    TaskQueue,
    ThreadReader,
    ToolCallRecord,
    ToolCallState,
    ToolObserver,
    UsageMeter,
)
from agent.core.text import (
    INVISIBLE_CHARACTERS,
    TAG_LOOKALIKES,
    sanitize_text,
    storable_json,
    storable_text,
)
from agent.durable.background import Supervisor, stop_task
from agent.durable.compaction import Compaction, CompactionSettings
from agent.durable.notices import FailureKind, FailureNotices
from agent.durable.responder import ModelResponder
from agent.durable.runner import Responder, RunnerObserver, RunnerSettings, TaskRunner
from agent.models.circuit import CircuitBreaker
from agent.models.contract import (
    AssistantMessage,
    Model,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NamedTool,
    StreamEvent,
    SystemMessage,
    ToolCall,
    ToolChoice,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
    Watch,
)
from agent.models.function_model import FunctionModel, text_response, tool_response
from agent.models.ladder import AttemptLadder, Attempts, RetryPolicy, answering_route
from agent.models.probe import ProbeResult, probe_model
from agent.models.providers import (
    DEFAULT_GATEWAY_HEADER,
    DEFAULT_MODEL_TIMEOUT,
    GATEWAY_HEADER_VARIABLE,
    GATEWAY_TOKEN_VARIABLE,
    VENDORS,
    ProviderSettings,
    Vendor,
    open_model,
)
from agent.rounds.control import ControlTool, Decision, Delegate, FinalReply, Reply, round_controls
from agent.rounds.loop import run_round
from agent.rounds.mcp_config import McpConfig, McpServerConfig, load_mcp_config, parse_mcp_config
from agent.rounds.mcp_tools import Backoff, Connecting, McpClients, McpServerState, McpTool
from agent.rounds.plugins import default_registries, load_subtask_types, load_tools
from agent.rounds.prompt import PROMPT_VERSION, prompt_epoch, system_prompt
from agent.rounds.references import ReferenceCatalog
from agent.rounds.settings import RoundSettings
from agent.rounds.subagent import AgentSubtask
from agent.rounds.subtask_types import SubtaskContext, SubtaskRegistry, SubtaskType
from agent.rounds.tools import (
    CurrentTime,
    ReadThread,
    Toolbox,
    ToolContext,
    ToolRegistry,
    WorkTool,
)

__all__ = [
    "DEFAULT_GATEWAY_HEADER",
    "DEFAULT_MODEL_TIMEOUT",
    "GATEWAY_HEADER_VARIABLE",
    "GATEWAY_TOKEN_VARIABLE",
    "INVISIBLE_CHARACTERS",
    "MAX_IMAGES_PER_REQUEST",
    "PROMPT_VERSION",
    "TAG_LOOKALIKES",
    "VENDORS",
    "AgentError",
    "AgentSubtask",
    "AlertSink",
    "AnswerOrigin",
    "AssistantMessage",
    "AttemptLadder",
    "Attempts",
    "Backoff",
    "CircuitBreaker",
    "Citation",
    "Compaction",
    "CompactionSettings",
    "ConfigError",
    "Connecting",
    "ControlCallError",
    "ControlTool",
    "CredentialRejected",
    "CredentialSource",
    "CurrentTime",
    "Decision",
    "Delegate",
    "Delegation",
    "DelegationStore",
    "Draft",
    "FailureKind",
    "FailureNotices",
    "FinalReply",
    "FunctionModel",
    "History",
    "Image",
    "LiveView",
    "McpClients",
    "McpConfig",
    "McpServerConfig",
    "McpServerState",
    "McpTool",
    "Memory",
    "Model",
    "ModelBudgetExceeded",
    "ModelError",
    "ModelMessage",
    "ModelRequest",
    "ModelResponder",
    "ModelResponse",
    "ModelsUnavailable",
    "NamedTool",
    "NonTransientModelError",
    "Overflow",
    "ProbeResult",
    "PromptEpoch",
    "ProviderSettings",
    "Publisher",
    "QuotaExhausted",
    "ReadThread",
    "ReferenceCatalog",
    "Reply",
    "Responder",
    "RetryPolicy",
    "RoundFailed",
    "RoundInput",
    "RoundRecord",
    "RoundSettings",
    "RoundState",
    "Route",
    "RunnerObserver",
    "RunnerSettings",
    "Step",
    "StepState",
    "StoredMessage",
    "StreamEvent",
    "StreamInterrupted",
    "Subtask",
    "SubtaskContext",
    "SubtaskFailed",
    "SubtaskOutcome",
    "SubtaskRegistry",
    "SubtaskRequest",
    "SubtaskState",
    "SubtaskType",
    "Summary",
    "SummaryStore",
    "Supervisor",
    "SystemMessage",
    "Task",
    "TaskQueue",
    "TaskRunner",
    "TaskTimedOut",
    "ThreadReader",
    "ToolCall",
    "ToolCallRecord",
    "ToolCallState",
    "ToolChoice",
    "ToolContext",
    "ToolObserver",
    "ToolRegistry",
    "ToolResultMessage",
    "ToolSpec",
    "Toolbox",
    "TransientModelError",
    "Usage",
    "UsageMeter",
    "UserMessage",
    "Vendor",
    "Watch",
    "WorkTool",
    "answering_route",
    "bind_log_fields",
    "default_registries",
    "load_mcp_config",
    "load_subtask_types",
    "load_tools",
    "log_fields",
    "open_model",
    "parse_mcp_config",
    "probe_model",
    "prompt_epoch",
    "reply_id",
    "round_controls",
    "run_round",
    "sanitize_text",
    "stop_task",
    "storable_json",
    "storable_text",
    "system_prompt",
    "text_response",
    "tool_response",
    "user_message_id",
]
