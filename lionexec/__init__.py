"""lionexec: a trio-native execution layer for tool calls and in-process async work.

The names most programs need are here; each layer (:mod:`lionexec.engine`,
:mod:`lionexec.tools`, :mod:`lionexec.governance`, :mod:`lionexec.conversation`,
:mod:`lionexec.act`) exports the rest.
"""

from .act import AlcallParams, BatchSummary, Branch, EventLog, alcall
from .conversation import (
    ActionOutcome,
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    ErrorInfo,
    Instruction,
    MessageManager,
    System,
)
from .engine import (
    TERMINAL_STATUSES,
    Event,
    EventStatus,
    Execution,
    Executor,
    Processor,
    Unset,
)
from .errors import (
    CallRejected,
    ConfigurationError,
    DuplicateToolError,
    HistoryError,
    LionexecError,
    SchemaError,
    ToolNotFoundError,
    ValidationError,
)
from .governance import (
    CallContext,
    HookBus,
    HookPoint,
    PermissionDecision,
    PermissionPolicy,
    SessionObserver,
    StopHook,
    ToolInvocation,
)
from .tools import ActionManager, FunctionCalling, Tool

__all__ = [
    "TERMINAL_STATUSES",
    "ActionManager",
    "ActionOutcome",
    "ActionRequest",
    "ActionResponse",
    "AlcallParams",
    "AssistantResponse",
    "BatchSummary",
    "Branch",
    "CallContext",
    "CallRejected",
    "ConfigurationError",
    "DuplicateToolError",
    "ErrorInfo",
    "Event",
    "EventLog",
    "EventStatus",
    "Execution",
    "Executor",
    "FunctionCalling",
    "HistoryError",
    "HookBus",
    "HookPoint",
    "Instruction",
    "LionexecError",
    "MessageManager",
    "PermissionDecision",
    "PermissionPolicy",
    "Processor",
    "SchemaError",
    "SessionObserver",
    "StopHook",
    "System",
    "Tool",
    "ToolInvocation",
    "ToolNotFoundError",
    "Unset",
    "ValidationError",
    "alcall",
]

__version__ = "0.1.0"
