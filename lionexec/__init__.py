"""lionexec: a trio-native execution layer for tool calls and in-process async work.

The names most programs need are here; each layer (:mod:`lionexec.engine`,
:mod:`lionexec.tools`, :mod:`lionexec.governance`, :mod:`lionexec.conversation`,
:mod:`lionexec.act`) exports the rest, and every exception lives in :mod:`lionexec.errors`
and is exported here too. Importing lionexec also registers the one cattrs converter of
:mod:`lionexec.serialization`.
"""

from . import serialization as serialization
from ._failures import FailureLog as FailureLog
from ._failures import FailureStatistics as FailureStatistics
from ._failures import ReportedFailure as ReportedFailure
from ._public import publish as _publish
from .act import AlcallParams as AlcallParams
from .act import BatchSummary as BatchSummary
from .act import Branch as Branch
from .act import EventLog as EventLog
from .act import alcall as alcall
from .conversation import ActionOutcome as ActionOutcome
from .conversation import ActionRequest as ActionRequest
from .conversation import ActionResponse as ActionResponse
from .conversation import AssistantResponse as AssistantResponse
from .conversation import ErrorInfo as ErrorInfo
from .conversation import FilePart as FilePart
from .conversation import ImagePart as ImagePart
from .conversation import Instruction as Instruction
from .conversation import MessageManager as MessageManager
from .conversation import System as System
from .conversation import TextPart as TextPart
from .engine import TERMINAL_STATUSES as TERMINAL_STATUSES
from .engine import Event as Event
from .engine import EventStatus as EventStatus
from .engine import Execution as Execution
from .engine import Executor as Executor
from .engine import ExecutorStatistics as ExecutorStatistics
from .engine import Processor as Processor
from .engine import ProcessorStatistics as ProcessorStatistics
from .engine import Unset as Unset
from .errors import ConfigurationError as ConfigurationError
from .errors import DuplicateCallError as DuplicateCallError
from .errors import DuplicateToolError as DuplicateToolError
from .errors import EventStateError as EventStateError
from .errors import EventTypeError as EventTypeError
from .errors import HistoryError as HistoryError
from .errors import LionexecError as LionexecError
from .errors import MessageNotFoundError as MessageNotFoundError
from .errors import NotDurableError as NotDurableError
from .errors import NotInTrioError as NotInTrioError
from .errors import ProcessorBusyError as ProcessorBusyError
from .errors import SchemaError as SchemaError
from .errors import ToolNotFoundError as ToolNotFoundError
from .errors import ValidationError as ValidationError
from .governance import AwaitingApproval as AwaitingApproval
from .governance import CallContext as CallContext
from .governance import GateDenied as GateDenied
from .governance import HookBus as HookBus
from .governance import HookPoint as HookPoint
from .governance import PermissionDecision as PermissionDecision
from .governance import PermissionPolicy as PermissionPolicy
from .governance import SessionObserver as SessionObserver
from .governance import StopHook as StopHook
from .governance import ToolInvocation as ToolInvocation
from .tools import ActionManager as ActionManager
from .tools import ArgumentSpec as ArgumentSpec
from .tools import FunctionCalling as FunctionCalling
from .tools import Tool as Tool

__all__ = [
    "TERMINAL_STATUSES",
    "ActionManager",
    "ActionOutcome",
    "ActionRequest",
    "ActionResponse",
    "AlcallParams",
    "ArgumentSpec",
    "AssistantResponse",
    "AwaitingApproval",
    "BatchSummary",
    "Branch",
    "CallContext",
    "ConfigurationError",
    "DuplicateCallError",
    "DuplicateToolError",
    "ErrorInfo",
    "Event",
    "EventLog",
    "EventStateError",
    "EventStatus",
    "EventTypeError",
    "Execution",
    "Executor",
    "ExecutorStatistics",
    "FailureLog",
    "FailureStatistics",
    "FilePart",
    "FunctionCalling",
    "GateDenied",
    "HistoryError",
    "HookBus",
    "HookPoint",
    "ImagePart",
    "Instruction",
    "LionexecError",
    "MessageManager",
    "MessageNotFoundError",
    "NotDurableError",
    "NotInTrioError",
    "PermissionDecision",
    "PermissionPolicy",
    "Processor",
    "ProcessorBusyError",
    "ProcessorStatistics",
    "ReportedFailure",
    "SchemaError",
    "SessionObserver",
    "StopHook",
    "System",
    "TextPart",
    "Tool",
    "ToolInvocation",
    "ToolNotFoundError",
    "Unset",
    "ValidationError",
    "alcall",
]

#: The version of lionexec; the one source (``pyproject.toml`` reads it from here).
__version__ = "0.1.0"

_publish(__name__, globals())
