"""The exceptions lionexec raises.

Every exception lionexec raises on purpose derives from :class:`LionexecError`, so a caller can
catch "anything lionexec refused" in one clause. Where an error is about a bad input, it also
derives from the builtin a Python user would expect (``ValueError``, ``TypeError``,
``LookupError``) so existing ``except ValueError`` code keeps working.
"""

from __future__ import annotations

from typing import Any

import trio

__all__ = [
    "ConfigurationError",
    "DuplicateCallError",
    "DuplicateToolError",
    "EventStateError",
    "EventTypeError",
    "HistoryError",
    "LionexecError",
    "MessageNotFoundError",
    "NotDurableError",
    "NotInTrioError",
    "ProcessorBusyError",
    "SchemaError",
    "ToolNotFoundError",
    "ValidationError",
]


class LionexecError(Exception):
    """Root of every exception lionexec raises deliberately."""


class ConfigurationError(LionexecError, ValueError):
    """A component was configured with a value it cannot work with.

    The message names the parameter and the value received.
    """


class ValidationError(LionexecError, ValueError):
    """Arguments or a record did not match what was declared.

    Attributes:
        field: the name of the offending field or argument, or ``None`` when the whole input
            was the wrong shape.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ToolNotFoundError(LionexecError, LookupError):
    """A call named a tool that is not registered.

    Attributes:
        name: the name that was asked for.
        available: the registered names, sorted.
        suggestion: the closest registered name, if one is close enough.
    """

    def __init__(self, name: str, available: list[str], suggestion: str | None) -> None:
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        listing = ", ".join(repr(n) for n in available) or "none"
        super().__init__(f"no tool named {name!r} is registered (registered: {listing}){hint}")
        self.name = name
        self.available = available
        self.suggestion = suggestion


class HistoryError(LionexecError, ValueError):
    """A message history refused a change that would break one of its invariants.

    The history is unchanged when this is raised. The invariants: message ids are unique; every
    action response follows the request it answers, and the two are linked both ways; a
    request is answered at most once.

    Attributes:
        message_id: the id of the message that was refused.
    """

    def __init__(self, message: str, *, message_id: object = None) -> None:
        super().__init__(message)
        self.message_id = message_id


class MessageNotFoundError(LionexecError, KeyError):
    """A message history has no message with the id asked for.

    Attributes:
        message_id: the id that was asked for.
    """

    def __init__(self, message_id: object) -> None:
        super().__init__(message_id)
        self.message_id = message_id

    def __str__(self) -> str:
        return f"no message with id {self.message_id} is in this history"


class SchemaError(LionexecError, TypeError):
    """A tool's signature, type hint or request class cannot be described as JSON Schema.

    Raised when a tool is defined, never while it runs. The message names the parameter.
    """


class DuplicateToolError(LionexecError, ValueError):
    """A tool was registered under a name that is already taken.

    Attributes:
        name: the contested tool name.
    """

    def __init__(self, name: str) -> None:
        super().__init__(
            f"a tool named {name!r} is already registered; pass update=True to replace it"
        )
        self.name = name


class EventTypeError(LionexecError, TypeError):
    """An event of the wrong class was handed to a processor or an executor.

    Attributes:
        expected: the event class that was required.
        received: the class of the event that was refused.
        strict: ``True`` when only *expected* itself was acceptable, not its subclasses.
    """

    def __init__(self, expected: type, received: type, *, strict: bool = False) -> None:
        wanted = f"exactly {expected.__qualname__}" if strict else expected.__qualname__
        more = " (strict_event_type: subclasses are refused)" if strict else ""
        super().__init__(f"expected an event of type {wanted}, got {received.__qualname__}{more}")
        self.expected = expected
        self.received = received
        self.strict = strict


class EventStateError(LionexecError, ValueError):
    """An event was handed to a processor that cannot take it in its current state.

    A processor runs an event at most once: it refuses an event that is already in it (queued,
    or taken or started by a cycle) and one that is no longer ``pending`` (started or finished
    elsewhere). Nothing was enqueued when this is raised.

    Attributes:
        event_id: the id of the refused event.
        status: its status when it was refused.
    """

    def __init__(self, message: str, *, event_id: object, status: object) -> None:
        super().__init__(message)
        self.event_id = event_id
        self.status = status


class ProcessorBusyError(LionexecError, trio.BusyResourceError):
    """A processor's :meth:`~lionexec.engine.Processor.execute` service is already running.

    A processor runs at most one service at a time; start a second processor instead.
    """


class DuplicateCallError(LionexecError, ValueError):
    """A proposed call cannot get a new response: its request or call id is taken.

    Raised by :meth:`~lionexec.act.Branch.act` before anything of the batch is recorded: two
    calls of one batch share a call id, a call id is already in the history, or the same
    request is already running in another ``act()``.

    Attributes:
        call_id: the call id concerned.
    """

    def __init__(self, message: str, *, call_id: str) -> None:
        super().__init__(message)
        self.call_id = call_id


class NotDurableError(LionexecError):
    """:meth:`~lionexec.act.Branch.act` ran its batch, but a durable sink (a journal) does
    not hold the batch's record: its write failed (the sink's error is the ``__cause__``).

    Raised instead of returning: a response a caller has seen is one the durable sinks
    hold. Every call was answered and is recorded in the branch's history. A journal writes
    what it missed with its next commit (``await journal.flush()``); a crash before that
    recovers the calls as their effect classes say (a journal holds their write-aheads).

    Attributes:
        responses: what ``act()`` would have returned, recorded in memory only (a caller
            that can act on responses not yet durable finds them here).
        sink: the ``repr`` of the sink that does not hold them.
    """

    def __init__(self, message: str, *, responses: list[Any], sink: str) -> None:
        super().__init__(message)
        self.responses = responses
        self.sink = sink


class NotInTrioError(LionexecError, RuntimeError):
    """A lionexec coroutine was awaited outside a trio run (for instance under ``asyncio.run``).

    Raised before anything is recorded.
    """


def require_trio(what: str) -> None:
    """Raise :class:`NotInTrioError` naming *what* unless running inside trio."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        raise NotInTrioError(
            f"{what} must run inside trio: lionexec is a trio library. Run it with "
            "trio.run(main), or from anyio with anyio.run(main, backend='trio')."
        ) from None
