"""threadgate's agent: the round loop, control and work tools, subtasks, and the model layer.

This module is the package's public surface: what `gateway/` and plugin authors use.
Everything not re-exported here is an implementation detail and may change.
"""

from agent.circuit import CircuitBreaker
from agent.control import ControlTool, Decision, Delegate, FinalReply, Reply, round_controls
from agent.delegation import (
    Delegation,
    RoundInput,
    RoundRecord,
    RoundState,
    RoundStore,
    Subtask,
    SubtaskOutcome,
    SubtaskRequest,
    SubtaskState,
)
from agent.errors import (
    AgentError,
    ConfigError,
    ControlCallError,
    CredentialRejected,
    CredentialSource,
    ModelError,
    ModelsUnavailable,
    NonTransientModelError,
    QuotaExhausted,
    RoundFailed,
    Route,
    StreamInterrupted,
    SubtaskFailed,
    TransientModelError,
)
from agent.function_model import FunctionModel, text_response, tool_response
from agent.ladder import AttemptLadder, RetryPolicy
from agent.model import (
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
)
from agent.plugins import default_registries, load_subtask_types, load_tools
from agent.ports import (
    AlertSink,
    History,
    Publisher,
    StoredMessage,
    Task,
    TaskQueue,
    ThreadReader,
)
from agent.probe import ProbeResult, probe_model
from agent.providers import ProviderSettings, open_model
from agent.references import ReferenceCatalog
from agent.responder import Responder
from agent.rounds import Attempts, RoundSettings, run_round
from agent.runner import RunnerSettings, TaskRunner
from agent.subtasks import AgentSubtask, SubtaskContext, SubtaskRegistry, SubtaskType
from agent.tools import CurrentTime, ReadThread, Toolbox, ToolContext, ToolRegistry, WorkTool

__all__ = [
    "AgentError",
    "AgentSubtask",
    "AlertSink",
    "AssistantMessage",
    "AttemptLadder",
    "Attempts",
    "CircuitBreaker",
    "ConfigError",
    "ControlCallError",
    "ControlTool",
    "CredentialRejected",
    "CredentialSource",
    "CurrentTime",
    "Decision",
    "Delegate",
    "Delegation",
    "FinalReply",
    "FunctionModel",
    "History",
    "Model",
    "ModelError",
    "ModelMessage",
    "ModelRequest",
    "ModelResponse",
    "ModelsUnavailable",
    "NamedTool",
    "NonTransientModelError",
    "ProbeResult",
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
    "RoundStore",
    "Route",
    "RunnerSettings",
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
    "SystemMessage",
    "Task",
    "TaskQueue",
    "TaskRunner",
    "ThreadReader",
    "ToolCall",
    "ToolChoice",
    "ToolContext",
    "ToolRegistry",
    "ToolResultMessage",
    "ToolSpec",
    "Toolbox",
    "TransientModelError",
    "Usage",
    "UserMessage",
    "WorkTool",
    "default_registries",
    "load_subtask_types",
    "load_tools",
    "open_model",
    "probe_model",
    "round_controls",
    "run_round",
    "text_response",
    "tool_response",
]
