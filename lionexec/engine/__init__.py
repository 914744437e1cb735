"""The engine layer: events, their lifecycle, and the processor and executor that run them."""

from .._public import publish as _publish
from ._event import NOT_SERIALIZED as NOT_SERIALIZED
from ._event import Event as Event
from ._execution import MAX_GROUPED_ERRORS as MAX_GROUPED_ERRORS
from ._execution import Execution as Execution
from ._execution import Unset as Unset
from ._execution import UnsetType as UnsetType
from ._executor import Executor as Executor
from ._executor import ExecutorState as ExecutorState
from ._executor import ExecutorStatistics as ExecutorStatistics
from ._processor import Processor as Processor
from ._processor import ProcessorStatistics as ProcessorStatistics
from ._status import TERMINAL_STATUSES as TERMINAL_STATUSES
from ._status import EventStatus as EventStatus

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
