"""The engine layer: events, their lifecycle, and the processor that runs them (ADR-0003)."""

from .event import NOT_SERIALIZED, Event
from .execution import MAX_GROUPED_ERRORS, Execution, Unset, UnsetType
from .executor import Executor, ExecutorState, ExecutorStatistics
from .processor import Processor, ProcessorStatistics
from .status import TERMINAL_STATUSES, EventStatus

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
