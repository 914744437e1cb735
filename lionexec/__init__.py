"""lionexec: a trio-native execution layer for tool calls and in-process async work."""

from .engine import (
    TERMINAL_STATUSES,
    Event,
    EventStatus,
    Execution,
    Unset,
)
from .errors import ConfigurationError, LionexecError, ToolNotFoundError, ValidationError

__all__ = [
    "TERMINAL_STATUSES",
    "ConfigurationError",
    "Event",
    "EventStatus",
    "Execution",
    "LionexecError",
    "ToolNotFoundError",
    "Unset",
    "ValidationError",
]

__version__ = "0.1.0"
