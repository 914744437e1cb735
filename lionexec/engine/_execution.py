"""The mutable outcome record every event carries: status, duration, response, error."""

from __future__ import annotations

import enum
from typing import Any, Final, Literal, TypeAlias

import attrs

from ._status import EventStatus, status_of

__all__ = ["MAX_GROUPED_ERRORS", "Execution", "Unset", "UnsetType", "drop_tracebacks"]

#: ``Execution.add_error`` keeps at most this many exceptions in its group; later ones are
#: dropped. The same bound as the reference implementation's, so diagnostics stay bounded.
MAX_GROUPED_ERRORS: Final = 100


class UnsetType(enum.Enum):
    """The type of :data:`Unset`: "never recorded", as distinct from a recorded ``None``."""

    Unset = "Unset"

    def __repr__(self) -> str:
        return "Unset"

    def __bool__(self) -> Literal[False]:
        return False


#: Marks ``duration`` and ``retryable`` that were never recorded. Serializes as ``None``.
Unset: Final = UnsetType.Unset

ErrorValue: TypeAlias = "str | BaseException | None"


def _status(value: EventStatus | str) -> EventStatus:
    """``Execution(status=...)``: an :class:`EventStatus` or one of its string values."""
    return value if type(value) is EventStatus else status_of(value)


# one per event is kept: 8 B each without a weakref slot; no __setattr__ hook (plain stores)
@attrs.define(eq=False, repr=True, weakref_slot=False, on_setattr=attrs.setters.NO_OP)
class Execution:
    """What happened to one event: status, duration, response, error and retryability.

    A plain mutable slotted record, updated in place while the event runs. The constructor's
    *status* takes an :class:`EventStatus` or one of its seven string values (stored as the
    :class:`EventStatus`); anything else raises :class:`ValueError`. Assigning
    ``execution.status`` directly afterwards is allowed and bypasses both that validation and
    completion signalling (a record is data, not a state machine); go through
    :attr:`Event.status` to get those.

    ``retryable`` is descriptive only: nothing in lionexec retries because of it.
    """

    status: EventStatus = attrs.field(default=EventStatus.PENDING, converter=_status)
    duration: float | UnsetType | None = Unset
    response: Any = None
    error: str | BaseException | None = None
    retryable: bool | UnsetType | None = Unset

    def add_error(self, exc: BaseException) -> None:
        """Record *exc*.

        The first error is stored as it is; the second turns ``error`` into an exception group
        of both; later ones are appended to that group, up to :data:`MAX_GROUPED_ERRORS`
        members, after which further errors are ignored. A string already in ``error`` (the
        field takes one) is a first error too: it joins the group as an :class:`Exception`
        whose message is that string.
        """
        current = self.error
        if current is None:
            self.error = exc
            return
        if isinstance(current, str):
            current = Exception(current)
        if isinstance(current, BaseExceptionGroup) and getattr(current, "_lionexec_acc", False):
            members = current.exceptions
            if len(members) >= MAX_GROUPED_ERRORS:
                return
            self.error = _accumulated([*members, exc])
            return
        self.error = _accumulated([current, exc])


def _accumulated(members: list[BaseException]) -> BaseExceptionGroup[BaseException]:
    group = BaseExceptionGroup("multiple errors recorded on one event", members)
    group._lionexec_acc = True  # type: ignore[attr-defined]  # ours, so later errors append
    return group


def drop_tracebacks(exc: BaseException, *, stop: BaseException | None = None) -> None:
    """Clear the traceback of *exc* and of every exception chained to it, in place.

    Follows ``__cause__``, ``__context__`` and the members of exception groups, each exception
    once. *stop* (typically the exception that was already being handled when the failing work
    began, ``sys.exception()``) and everything chained behind it are left untouched: they may
    still be in use higher up the stack.

    What remains is inspectable as before (type, ``str()``, ``args``, attributes, notes,
    ``isinstance`` and the chain), but no frame, and nothing a frame refers to (locals,
    coroutines, the event itself), is kept alive by it. Raising it again starts a new
    traceback at the ``raise``.
    """
    chained = exc.__cause__ is not None or exc.__context__ is not None
    # the usual failure: a single exception, nothing chained to walk
    if not chained and not isinstance(exc, BaseExceptionGroup):
        if exc is not stop:
            exc.__traceback__ = None
        return
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is stop or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = None
        if current.__cause__ is not None:
            todo.append(current.__cause__)
        if current.__context__ is not None:
            todo.append(current.__context__)
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
