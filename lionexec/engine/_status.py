"""The seven execution statuses and the terminal set; any status may follow any other."""

from __future__ import annotations

from enum import StrEnum
from typing import Final, NoReturn

__all__ = ["TERMINAL_STATUSES", "EventStatus"]


class EventStatus(StrEnum):
    """Where a unit of work is in its life.

    ``pending`` and ``processing`` are live; the other five are terminal. Only ``completed`` is
    success: ``skipped``, ``cancelled`` and ``aborted`` are never reported as success by any
    lionexec summary, which is total over the five terminal statuses.
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

_ALLOWED: Final = ", ".join(repr(s.value) for s in EventStatus)


def status_of(value: object) -> EventStatus:
    """*value* as an :class:`EventStatus`: one, or one of the seven string values.

    Anything else raises :class:`ValueError` naming it. (Private to the engine: the
    :attr:`Event.status <lionexec.engine.Event.status>` setter and ``Execution(status=...)``.)
    """
    if type(value) is EventStatus:
        return value
    if isinstance(value, str):
        try:
            return EventStatus(value)
        except ValueError:
            pass
    _invalid(value)


def _invalid(value: object) -> NoReturn:
    raise ValueError(f"invalid event status {value!r}; expected one of {_ALLOWED}")
