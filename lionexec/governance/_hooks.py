"""The hook bus: handlers that run at named points of a tool call or of the history."""

from __future__ import annotations

import dis
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from types import CodeType, FunctionType, MappingProxyType, MethodType
from typing import Any, Final, TypeAlias

import attrs
import trio

from .._failures import MAX_KEPT_FAILURES, FailureLog, ReportedFailure, must_await

__all__ = [
    "MAX_KEPT_FAILURES",
    "HookBus",
    "HookBusStatistics",
    "HookFailure",
    "HookHandler",
    "HookPoint",
    "PreHookResult",
    "StopHook",
]

logger = logging.getLogger("lionexec.hooks")

#: A hook handler: called with keyword arguments only; may return an awaitable.
HookHandler: TypeAlias = Callable[..., Any]

#: The failure record :meth:`HookBus.emit` returns: a :class:`~lionexec.ReportedFailure`
#: whose ``where`` is ``"hook:<point>"``. (The name of its older, hook-only predecessor.)
HookFailure: TypeAlias = ReportedFailure


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
    error: Exception | None = attrs.field(default=None, kw_only=True)
    handler: HookHandler | None = attrs.field(default=None, eq=False, kw_only=True)


#: ``HookPoint.TOOL_PRE``, read as a module name on every call (through the class, an enum
#: member costs about a small function call on Python 3.11).
_TOOL_PRE: Final = HookPoint.TOOL_PRE
#: The verdict that lets a call go ahead (frozen: one for every call).
_ALLOWED: Final = PreHookResult(True)


#: Names through which a function can read its own frame's locals, and so a keyword argument
#: that its code never names.
_INTROSPECTION: Final = frozenset(
    {"locals", "vars", "eval", "exec", "_getframe", "currentframe", "f_locals", "breakpoint"}
)


def _keywords_read(handler: HookHandler) -> frozenset[str] | None:
    """The keyword arguments *handler* may read, or ``None`` for any.

    A function (or a bound method) with a ``**`` parameter that its code never uses (the
    ``**_`` catch-all of ``lambda *, duration, **_: ...``) reads only the parameters it
    names: a keyword it does not name lands in a dict nothing looks at. Any other callable
    may read every keyword: one without a ``**`` parameter binds each to a parameter (or
    refuses it with a ``TypeError``, which must still happen); a ``**`` parameter the code
    uses, captures in a closure, or might reach through its frame (``locals()``...), any
    other kind of callable (a class instance, a :func:`functools.partial`), each might read
    anything.
    """
    function = handler.__func__ if type(handler) is MethodType else handler
    if type(function) is not FunctionType:
        return None
    code = function.__code__
    flags = code.co_flags
    if not flags & inspect.CO_VARKEYWORDS:
        return None
    named = code.co_argcount + code.co_kwonlyargcount
    rest = code.co_varnames[named + (1 if flags & inspect.CO_VARARGS else 0)]
    if rest in code.co_cellvars or _mentions(code, rest) or _introspects(code):
        return None
    return frozenset(code.co_varnames[:named])


def _read_by_all(handlers: tuple[HookHandler, ...]) -> frozenset[str] | None:
    """The keyword arguments one of *handlers* may read, or ``None`` for any."""
    reads: frozenset[str] = frozenset()
    for handler in handlers:
        named = _keywords_read(handler)
        if named is None:
            return None
        reads |= named
    return reads


def _mentions(code: CodeType, name: str) -> bool:
    """Whether an instruction of *code* (not of the code nested in it) names *name* (a local
    loaded, stored or deleted; or, erring on the side of reading, a constant or global of
    that name)."""
    for instruction in dis.get_instructions(code):
        value = instruction.argval
        if (type(value) is str and value == name) or (type(value) is tuple and name in value):
            return True
    return False


def _introspects(code: CodeType) -> bool:
    """Whether *code*, or code nested in it, uses a name that reaches a frame's locals."""
    if not _INTROSPECTION.isdisjoint(code.co_names):
        return True
    return any(type(const) is CodeType and _introspects(const) for const in code.co_consts)


def _name(handler: HookHandler) -> str:
    return getattr(handler, "__qualname__", None) or repr(handler)


def _read_only(counts: Mapping[HookPoint, int]) -> Mapping[HookPoint, int]:
    return MappingProxyType(dict(counts))


@attrs.frozen(kw_only=True)
class HookBusStatistics:
    """A snapshot of a :class:`HookBus` (see :meth:`HookBus.statistics`).

    Attributes:
        handlers: how many handlers each point has (points without any are left out).
        failures_total: how many failures were ever reported to the bus's failure log.
        failures_dropped: how many of those the log no longer keeps.
    """

    handlers: Mapping[HookPoint, int] = attrs.field(converter=_read_only)
    failures_total: int
    failures_dropped: int


class HookBus:
    """Handlers per :class:`HookPoint`, run in registration order.

    Handlers may be plain functions or coroutine functions (anything whose result is awaitable
    is awaited) and are called with keyword arguments only. A handler registered twice runs
    twice. Cancellation and other non-``Exception`` errors raised by a handler always
    propagate. :meth:`run_pre` and :meth:`emit` are checkpoints, even with no handler: if the
    caller is already cancelled, they raise ``trio.Cancelled`` before running any handler.

    * ``tool.pre`` is blocking: :meth:`run_pre` runs its handlers one by one and returns a
      :class:`PreHookResult`. A handler denies the call by raising any exception other than
      :class:`StopHook`, or by returning exactly ``False``; the first denial ends the run.
      :class:`StopHook` ends the run with the call allowed.
    * Every other point is isolated: :meth:`emit` runs every handler (until one raises
      :class:`StopHook`); a handler that raises is reported once to :attr:`failures` (which
      keeps it and logs it on the ``lionexec`` logger) and returned, and the rest still run.

    A handler is called with the keyword arguments its caller passes. A branch's calls pass
    a keyword that costs something to make (a summary, an error's copy, the call context)
    only when a handler at that point may read it: a handler that names it as a parameter,
    or whose ``**`` parameter its code uses. One whose ``**`` catch-all its code never
    touches (``lambda *, duration, **_: ...``) is not given the keywords it does not name;
    any other callable gets them all. Which handlers may read what is settled when they
    are added (:meth:`on`) or removed (:meth:`off`).

    Args:
        failures: where failures are reported; by default a :class:`~lionexec.FailureLog` of
            the bus's own. Pass a shared one (as a branch does) to keep and log each failure
            once, whichever component noticed it.
    """

    __slots__ = ("_handlers", "_reads", "failures", "points")

    def __init__(self, *, failures: FailureLog | None = None) -> None:
        #: The handlers of each point, as the run that starts now sees them (a new tuple at
        #: each change: a run goes on over the handlers it started with, and copies nothing).
        self._handlers: dict[HookPoint, tuple[HookHandler, ...]] = {}
        #: Per point with handlers, the keyword arguments one of them may read, or ``None``
        #: for any (see :func:`_keywords_read`). The act transaction builds a costly keyword
        #: (a summary, a copy, the call context) only where one may be read.
        self._reads: dict[HookPoint, frozenset[str] | None] = {}
        #: The points that have a handler now (read-only; :meth:`on` and :meth:`off` keep it).
        #: ``point in bus.points`` is :meth:`has_handlers` without a call (the act path asks
        #: it several times per tool call, where a method call each would show).
        self.points: frozenset[HookPoint] = frozenset()
        #: Failures of :meth:`emit` handlers, oldest first (bounded; see
        #: :class:`~lionexec.FailureLog`).
        self.failures: FailureLog = FailureLog() if failures is None else failures

    def on(self, point: HookPoint | str, handler: HookHandler) -> HookHandler:
        """Run *handler* at *point* from now on; returns *handler*."""
        if not callable(handler):
            raise TypeError(f"a hook handler must be callable, not {handler!r}")
        key = HookPoint(point)
        self._handlers[key] = (*self._handlers.get(key, ()), handler)
        self._reread(key)
        self.points |= {key}
        return handler

    def off(self, point: HookPoint | str, handler: HookHandler) -> None:
        """Stop running *handler* at *point* (its latest registration); absent is fine."""
        key = HookPoint(point)
        handlers = self._handlers.get(key, ())
        for index in range(len(handlers) - 1, -1, -1):
            if handlers[index] == handler:
                rest = handlers[:index] + handlers[index + 1 :]
                if rest:
                    self._handlers[key] = rest
                else:
                    del self._handlers[key]
                    self.points -= {key}
                self._reread(key)
                return

    def _reread(self, key: HookPoint) -> None:
        """Settle which keyword arguments the handlers at *key* may read (:attr:`_reads`).

        A subclass may read them in its own methods: for its points, any."""
        handlers = self._handlers.get(key)
        if not handlers:
            self._reads.pop(key, None)
            return
        self._reads[key] = None if type(self) is not HookBus else _read_by_all(handlers)

    def handlers_for(self, point: HookPoint | str) -> tuple[HookHandler, ...]:
        """The handlers at *point*, in the order they run."""
        key = point if type(point) is HookPoint else HookPoint(point)
        return self._handlers.get(key, ())

    def has_handlers(self, point: HookPoint) -> bool:
        """Whether any handler runs at *point* (a :class:`HookPoint`): ``bool(handlers_for(
        point))`` without building the tuple; ``point in`` :attr:`points`."""
        return point in self.points

    def statistics(self) -> HookBusStatistics:
        """Handler counts per point and failure counters, as a snapshot."""
        failures = self.failures.statistics()
        return HookBusStatistics(
            handlers={point: len(hs) for point, hs in self._handlers.items() if hs},
            failures_total=failures.total,
            failures_dropped=failures.dropped,
        )

    async def run_pre(self, **kwargs: Any) -> PreHookResult:
        """Run the ``tool.pre`` handlers with *kwargs*; see the class docstring.

        A denial is a value, never an exception; it is logged at warning level on the
        ``lionexec.hooks`` logger. A checkpoint on every path.
        """
        await trio.lowlevel.checkpoint()
        return await self._run_pre(**kwargs)

    async def _run_pre(self, **kwargs: Any) -> PreHookResult:
        """:meth:`run_pre` without its own checkpoint (bound by :class:`BoundSeams` for a
        caller that yields once per call)."""
        verdict = self._pre_now(kwargs)
        return verdict if isinstance(verdict, PreHookResult) else await verdict

    def _pre_now(self, kwargs: dict[str, Any]) -> PreHookResult | Awaitable[PreHookResult]:
        """:meth:`_run_pre` as far as it gets without awaiting: the verdict, or, at the first
        handler whose result must be awaited, a coroutine that awaits it and runs the rest.
        Synchronous handlers (most are) then cost no coroutine at all."""
        run = self._handlers.get(_TOOL_PRE)
        if not run:
            return _ALLOWED
        index = -1  # (counted, not enumerated: no iterator and tuples made per handler)
        for handler in run:
            index += 1
            try:
                result = handler(**kwargs)  # call_user, without its coroutine (see must_await)
                if result is None or result is True:  # (the usual results: never awaitable)
                    continue
                if must_await(result):
                    return self._pre_rest(run, index, result, kwargs)
            except StopHook:
                break
            except Exception as exc:
                return _pre_raised(handler, exc)
            return _pre_refused(handler, result)
        return _ALLOWED

    async def _pre_rest(
        self,
        run: tuple[HookHandler, ...],
        index: int,
        pending: Awaitable[Any] | None,
        kwargs: dict[str, Any],
    ) -> PreHookResult:
        """The ``tool.pre`` run from handler *index* on, whose result *pending* is awaited
        first (see :meth:`_pre_now`)."""
        for handler in run[index:]:
            try:
                if pending is None:
                    result = handler(**kwargs)
                    if must_await(result):
                        result = await result
                else:
                    result, pending = await pending, None
            except StopHook:
                break
            except Exception as exc:
                return _pre_raised(handler, exc)
            if result is None or result is True:
                continue
            return _pre_refused(handler, result)
        return _ALLOWED

    async def emit(self, point: HookPoint | str, **kwargs: Any) -> list[ReportedFailure]:
        """Run the handlers at a non-blocking *point* with *kwargs*; return their failures.

        Each failure is a :class:`~lionexec.ReportedFailure` with ``where="hook:<point>"``,
        the ``call_id`` keyword (or the ``call_id`` of a ``message`` keyword) if there is
        one, and the handler's ``repr`` as culprit; it is reported to :attr:`failures` once.
        A checkpoint on every path.
        """
        await trio.lowlevel.checkpoint()
        return await self._emit(point, **kwargs)

    async def _emit(self, point: HookPoint | str, **kwargs: Any) -> list[ReportedFailure]:
        """:meth:`emit` without its own checkpoint (bound by :class:`BoundSeams`; see
        :meth:`_run_pre`)."""
        if type(point) is not HookPoint:
            point = HookPoint(point)
        if point is _TOOL_PRE:
            raise ValueError("tool.pre is blocking: run its handlers with run_pre()")
        failures = self._emit_now(point, kwargs)
        if failures is None:
            return []
        return failures if isinstance(failures, list) else await failures

    def _emit_now(
        self, point: HookPoint, kwargs: dict[str, Any]
    ) -> list[ReportedFailure] | Awaitable[list[ReportedFailure]] | None:
        """:meth:`_emit` for a non-blocking :class:`HookPoint` as far as it gets without
        awaiting: the failures (``None`` for none: no list made when every handler ran, as
        most do), or, at the first handler whose result must be awaited, a coroutine that
        awaits it and runs the rest (see :meth:`_pre_now`)."""
        failures: list[ReportedFailure] | None = None
        run = self._handlers.get(point)
        if not run:
            return None
        index = -1  # (counted: see _pre_now)
        for handler in run:
            index += 1
            try:
                result = handler(**kwargs)  # call_user, without its coroutine (see must_await)
                if result is not None and must_await(result):  # (None: the usual result)
                    return self._emit_rest(point, run, index, result, kwargs, failures or [])
            except StopHook:
                break
            except Exception as exc:
                failed = self.failures.failed(
                    _WHERE[point], exc, call_id=_call_id_of(kwargs), culprit=handler
                )
                if failures is None:
                    failures = [failed]
                else:
                    failures.append(failed)
        return failures

    async def _emit_rest(
        self,
        point: HookPoint,
        run: tuple[HookHandler, ...],
        index: int,
        pending: Awaitable[Any] | None,
        kwargs: dict[str, Any],
        failures: list[ReportedFailure],
    ) -> list[ReportedFailure]:
        """The run of *point* from handler *index* on, whose result *pending* is awaited
        first (see :meth:`_emit_now`)."""
        for handler in run[index:]:
            try:
                if pending is None:
                    result = handler(**kwargs)
                    if must_await(result):
                        await result
                else:
                    await pending
                    pending = None
            except StopHook:
                break
            except Exception as exc:
                pending = None
                failures.append(
                    self.failures.failed(
                        _WHERE[point], exc, call_id=_call_id_of(kwargs), culprit=handler
                    )
                )
        return failures


def _pre_raised(handler: HookHandler, exc: Exception) -> PreHookResult:
    reason = f"tool.pre handler {_name(handler)} raised {type(exc).__name__}: {exc}"
    logger.warning("call denied: %r", reason)
    return PreHookResult(False, reason, error=exc, handler=handler)


def _pre_refused(handler: HookHandler, result: object) -> PreHookResult:
    """The denial of a ``tool.pre`` handler that returned *result* (neither ``None`` nor
    ``True``: only those allow, so a hook's mistake fails closed)."""
    if result is False:
        reason = f"tool.pre handler {_name(handler)} returned False"
    else:
        reason = (
            f"tool.pre handler {_name(handler)} returned {_cut_repr(result)}; "
            "only True or None allow a call"
        )
    logger.warning("call denied: %r", reason)
    return PreHookResult(False, reason, handler=handler)


_WHERE: dict[HookPoint, str] = {point: f"hook:{point.value}" for point in HookPoint}


def _call_id_of(kwargs: dict[str, Any]) -> str | None:
    """The call id a hook's keyword arguments name, directly or through their message."""
    call_id = kwargs.get("call_id")
    if call_id is None and "message" in kwargs:
        try:
            call_id = getattr(kwargs["message"], "call_id", None)
        except Exception:
            return None
    return call_id if isinstance(call_id, str) else None


def _cut_repr(value: object, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__qualname__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"
