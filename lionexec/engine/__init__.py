"""The engine layer: events, their lifecycle, and the processor and executor that run them."""

from .._public import publish as _publish
from .event import NOT_SERIALIZED as NOT_SERIALIZED
from .event import Event as Event
from .execution import MAX_GROUPED_ERRORS as MAX_GROUPED_ERRORS
from .execution import Execution as Execution
from .execution import Unset as Unset
from .execution import UnsetType as UnsetType
from .executor import Executor as Executor
from .executor import ExecutorState as ExecutorState
from .executor import ExecutorStatistics as ExecutorStatistics
from .processor import Processor as Processor
from .processor import ProcessorStatistics as ProcessorStatistics
from .status import TERMINAL_STATUSES as TERMINAL_STATUSES
from .status import EventStatus as EventStatus

__all__ = [
    "MAX_GROUPED_ERRORS",
    "NOT_SERIALIZED",
    "TERMINAL_STATUSES",
    "Event",
    "EventStatus",
    "Execution",
    "Executor",
    "ExecutorState",
    "ExecutorStatistics",
    "Processor",
    "ProcessorStatistics",
    "Unset",
    "UnsetType",
]

_publish(__name__, globals())
