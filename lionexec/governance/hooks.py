"""The hook bus: handlers that run at named points of a tool call or of the history."""

from __future__ import annotations

import enum
import inspect
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Final, TypeAlias

import attrs

__all__ = [
    "MAX_KEPT_FAILURES",
    "HookBus",
    "HookFailure",
    "HookHandler",
    "HookPoint",
    "PreHookResult",
    "StopHook",
]

logger = logging.getLogger("lionexec.hooks")

#: How many recent failures a :class:`HookBus` (or a session observer) keeps for inspection.
#: Older ones are dropped; every failure is also logged and returned when it happens.
MAX_KEPT_FAILURES: Final = 1000

#: A hook handler: called with keyword arguments only; may return an awaitable.
HookHandler: TypeAlias = Callable[..., Any]


class HookPoint(enum.StrEnum):
    """The points a :class:`HookBus` runs handlers at."""

    #: Before a tool runs; blocking (see :meth:`HookBus.run_pre`).
    TOOL_PRE = "tool.pre"
    #: After a tool call completed.
    TOOL_POST = "tool.post"
    #: After a tool call ended in any other way.
    TOOL_ERROR = "tool.error"
    #: After a message was added to a history.
    MESSAGE_ADD = "message.add"


class StopHook(Exception):
    """Raise from a handler to skip the remaining handlers at this point.

    That is all it does: at ``tool.pre`` it is not a denial, and the call goes ahead.
    """


@attrs.frozen
class PreHookResult:
    """The verdict of the ``tool.pre`` handlers.

    Attributes:
        allowed: whether the call may go ahead.
        reason: why it may not, or ``None`` if allowed.
        error: the exception a handler raised to deny, if that is how it was denied.
        handler: the handler that denied, or ``None`` if allowed.
    """

    allowed: bool
    reason: str | None = None
    error: Exception | None = None
    handler: HookHandler | None = attrs.field(default=None, eq=False)


@attrs.frozen
class HookFailure:
    """A handler at a non-blocking point raised; the remaining handlers still ran."""

    point: HookPoint
    handler: HookHandler
    error: Exception


def _name(handler: HookHandler) -> str:
    return getattr(handler, "__qualname__", None) or repr(handler)


class HookBus:
    """Handlers per :class:`HookPoint`, run in registration order.

    Handlers may be plain functions or coroutine functions (anything whose result is awaitable
    is awaited) and are called with keyword arguments only. A handler registered twice runs
    twice. Cancellation and other non-``Exception`` errors raised by a handler always
    propagate.

    * ``tool.pre`` is blocking: :meth:`run_pre` runs its handlers one by one and returns a
      :class:`PreHookResult`. A handler denies the call by raising any exception other than
      :class:`StopHook`, or by returning exactly ``False``; the first denial ends the run.
      :class:`StopHook` ends the run with the call allowed.
    * Every other point is isolated: :meth:`emit` runs every handler (until one raises
      :class:`StopHook`); a handler that raises is logged on the ``lionexec.hooks`` logger,
      kept in :attr:`failures` and returned, and the rest still run.
    """

    def __init__(self) -> None:
        self._handlers: dict[HookPoint, list[HookHandler]] = {}
        #: The most recent failures of :meth:`emit` handlers, oldest first.
        self.failures: deque[HookFailure] = deque(maxlen=MAX_KEPT_FAILURES)

    def on(self, point: HookPoint | str, handler: HookHandler) -> HookHandler:
        """Run *handler* at *point* from now on; returns *handler*."""
        if not callable(handler):
            raise TypeError(f"a hook handler must be callable, not {handler!r}")
        self._handlers.setdefault(HookPoint(point), []).append(handler)
        return handler

    def off(self, point: HookPoint | str, handler: HookHandler) -> None:
        """Stop running *handler* at *point* (its latest registration); absent is fine."""
        handlers = self._handlers.get(HookPoint(point), [])
        for index in range(len(handlers) - 1, -1, -1):
            if handlers[index] == handler:
                del handlers[index]
                return

    def handlers_for(self, point: HookPoint | str) -> tuple[HookHandler, ...]:
        """The handlers at *point*, in the order they run."""
        key = point if type(point) is HookPoint else HookPoint(point)
        return tuple(self._handlers.get(key, ()))

    async def run_pre(self, **kwargs: Any) -> PreHookResult:
        """Run the ``tool.pre`` handlers with *kwargs*; see the class docstring.

        A denial is a value, never an exception; it is logged at warning level.
        """
        for handler in self.handlers_for(HookPoint.TOOL_PRE):
            try:
                result = handler(**kwargs)
                if inspect.isawaitable(result):
                    result = await result
            except StopHook:
                break
            except Exception as exc:
                reason = f"tool.pre handler {_name(handler)} raised {type(exc).__name__}: {exc}"
                logger.warning("call denied: %s", reason)
                return PreHookResult(False, reason, exc, handler)
            if result is False:
                reason = f"tool.pre handler {_name(handler)} returned False"
                logger.warning("call denied: %s", reason)
                return PreHookResult(False, reason, None, handler)
        return PreHookResult(True)

    async def emit(self, point: HookPoint | str, **kwargs: Any) -> list[HookFailure]:
        """Run the handlers at a non-blocking *point* with *kwargs*; return their failures."""
        point = HookPoint(point)
        if point is HookPoint.TOOL_PRE:
            raise ValueError("tool.pre is blocking: run its handlers with run_pre()")
        failures: list[HookFailure] = []
        for handler in self.handlers_for(point):
            try:
                result = handler(**kwargs)
                if inspect.isawaitable(result):
                    await result
            except StopHook:
                break
            except Exception as exc:
                logger.error("%s handler %s failed", point.value, _name(handler), exc_info=exc)
                failure = HookFailure(point, handler, exc)
                failures.append(failure)
                self.failures.append(failure)
        return failures
