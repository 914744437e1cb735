"""One way to call user code whose failure must not escape, and one record of such failures.

Hook handlers, observer subscribers, message callbacks and evidence sinks are user code that
runs *after* something was decided or recorded. If one raises an :class:`Exception`, that
must neither undo the record nor reach the caller: the failure is isolated, described by one
:class:`ReportedFailure`, kept in a bounded :class:`FailureLog` and logged exactly once, by
:meth:`FailureLog.report`. Cancellation and other :class:`BaseException` always propagate.

Several components may share one :class:`FailureLog` (a branch passes its own to its hook
bus, session observer and history): a failure is then stored once and logged once, whoever
noticed it.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final, TypeGuard

import attrs

__all__ = [
    "MAX_KEPT_FAILURES",
    "FailureLog",
    "FailureStatistics",
    "ReportedFailure",
    "call_user",
    "culprit_name",
    "must_await",
]

logger = logging.getLogger("lionexec")

#: How many failures a :class:`FailureLog` keeps by default; older ones are dropped (and
#: counted in :attr:`FailureStatistics.dropped`).
MAX_KEPT_FAILURES: Final = 1000

#: Longest text of a culprit, call id or error that goes into a log line; longer ones are cut.
_LOG_TEXT_LIMIT: Final = 300


async def call_user(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call *fn* with the arguments given; if the result is awaitable, await it.

    For user callables that may be plain functions or coroutine functions (or any callable
    returning an awaitable). Whatever *fn* raises, or its awaitable raises, propagates. Not a
    checkpoint by itself: a plain function runs without yielding.
    """
    result = fn(*args, **kwargs)
    if must_await(result):
        result = await result
    return result


def must_await(result: object) -> TypeGuard[Awaitable[Any]]:
    """Whether *result*, returned by a user callable, is awaitable (:func:`call_user`'s test).

    For the act path's own seams, which call a handler and await only what needs it: a
    coroutine per handler, and the keyword arguments packed twice, cost about as much as a
    trivial handler itself, and a governed call runs several such handlers.
    """
    # a plain result (most hooks and gates return None or a bool) is never awaitable: no ABC
    # check for it, as this runs for every hook and gate of every call
    return type(result) not in _PLAIN and inspect.isawaitable(result)


#: Result types that are never awaitable (exact types: a subclass may define ``__await__``).
_PLAIN: Final = frozenset({type(None), bool, int, float, str, bytes, tuple, list, dict})


def culprit_name(culprit: object) -> str:
    """How a failing handler, subscriber or callback is named in a :class:`ReportedFailure`.

    Its ``repr``, which for a function includes its qualified name. Never raises.
    """
    try:
        return repr(culprit)
    except Exception:
        return f"<{type(culprit).__qualname__} with a failing repr>"


@attrs.frozen(kw_only=True)
class ReportedFailure:
    """User code that raised where its failure must not escape; nothing recorded changed.

    Attributes:
        where: what was running: ``"hook:tool.post"`` (a hook at that point), ``"observer"``,
            ``"message_callback"``, ``"event_log"`` and so on.
        call_id: the tool call it happened for, if there was one.
        error: what was raised.
        culprit: the ``repr`` of the handler, subscriber, condition or callback that raised,
            if there was one (see :func:`culprit_name`).
    """

    where: str
    call_id: str | None = None
    error: BaseException
    culprit: str | None = None


@attrs.frozen(kw_only=True)
class FailureStatistics:
    """A snapshot of a :class:`FailureLog`.

    Attributes:
        kept: how many failures it holds now.
        total: how many were ever reported to it.
        dropped: how many of those were dropped to make room (``total - kept``).
        max_kept: how many it holds at most.
    """

    kept: int
    total: int
    dropped: int
    max_kept: int


def _cut(text: str) -> str:
    return text if len(text) <= _LOG_TEXT_LIMIT else text[: _LOG_TEXT_LIMIT - 1] + "…"


class FailureLog:
    """A bounded store of :class:`ReportedFailure`, oldest first.

    It keeps the most recent *max_kept* failures; older ones are dropped and counted. Every
    failure is logged once, when it is reported, at error level on the ``lionexec`` logger,
    with the traceback. Texts a model may control (call ids, error messages) appear in the log
    line as ``repr``, cut to a few hundred characters, so a crafted value cannot forge lines.
    """

    __slots__ = ("_failures", "_total")

    def __init__(self, *, max_kept: int = MAX_KEPT_FAILURES) -> None:
        if type(max_kept) is not int or max_kept < 1:
            raise ValueError(f"max_kept must be a positive int, not {max_kept!r}")
        self._failures: deque[ReportedFailure] = deque(maxlen=max_kept)
        self._total = 0

    def report(self, failure: ReportedFailure) -> ReportedFailure:
        """Keep and log *failure*; return it. Synchronous; never raises."""
        self._total += 1
        self._failures.append(failure)
        with contextlib.suppress(Exception):  # a broken handler must not make reporting raise
            logger.error(
                "%s failed (call %s, culprit %s): %s",
                failure.where,
                _cut(repr(failure.call_id)),
                _cut(failure.culprit or "-"),
                _cut(_error_text(failure.error)),
                exc_info=failure.error,
            )
        return failure

    def failed(
        self,
        where: str,
        error: BaseException,
        *,
        call_id: str | None = None,
        culprit: object = None,
    ) -> ReportedFailure:
        """Build a :class:`ReportedFailure` and :meth:`report` it; return it.

        *culprit* is the failing callable itself (named with :func:`culprit_name`), or
        ``None``.
        """
        return self.report(
            ReportedFailure(
                where=where,
                call_id=call_id,
                error=error,
                culprit=None if culprit is None else culprit_name(culprit),
            )
        )

    def statistics(self) -> FailureStatistics:
        """How many failures are kept, were reported, and were dropped."""
        kept = len(self._failures)
        return FailureStatistics(
            kept=kept,
            total=self._total,
            dropped=self._total - kept,
            max_kept=self._failures.maxlen or 0,
        )

    def clear(self) -> None:
        """Forget the kept failures; the counters keep counting (the cleared ones are dropped)."""
        self._failures.clear()

    def __len__(self) -> int:
        return len(self._failures)

    def __iter__(self) -> Iterator[ReportedFailure]:
        return iter(list(self._failures))

    def __getitem__(self, index: int) -> ReportedFailure:
        return self._failures[index]

    def __repr__(self) -> str:
        stats = self.statistics()
        return f"<FailureLog of {stats.kept} failures ({stats.total} reported)>"


def _error_text(error: BaseException) -> str:
    try:
        return repr(error)
    except Exception:
        return f"<{type(error).__qualname__} with a failing repr>"
