"""The seven execution statuses and the terminal set (ADR-0003 D1)."""

from __future__ import annotations

from enum import StrEnum
from typing import Final

__all__ = ["TERMINAL_STATUSES", "EventStatus"]


class EventStatus(StrEnum):
    """Where a unit of work is in its life.

    ``pending`` and ``processing`` are live; the other five are terminal. Only ``completed`` is
    success: ``skipped``, ``cancelled`` and ``aborted`` are never reported as success by any
    lionexec summary (DELTAS E1).
    """

    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    ABORTED = "aborted"

    @property
    def is_terminal(self) -> bool:
        """True for the five statuses an event never leaves through :meth:`Event.invoke`."""
        return self in TERMINAL_STATUSES


#: The five statuses an event never leaves through :meth:`Event.invoke`.
TERMINAL_STATUSES: Final[frozenset[EventStatus]] = frozenset(
    {
        EventStatus.COMPLETED,
        EventStatus.FAILED,
        EventStatus.SKIPPED,
        EventStatus.CANCELLED,
        EventStatus.ABORTED,
    }
)
