"""How a tool's callables run: async ones on the trio thread, sync ones in a worker thread.

This is lionexec's sync policy, shared by tools and :func:`~lionexec.act.alcall`: a sync
callable never blocks the event loop unless it opts into ``inline``, and an awaitable that
any callable returns is awaited, never handed back as the result.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import trio

__all__ = [
    "DEFAULT_TOOL_THREADS",
    "current_tool_limiter",
    "is_async_callable",
    "run_callable",
    "set_inline_warning",
]

_log = logging.getLogger("lionexec")
#: Seconds an inline callable may hold the trio thread before it is reported (None: never).
_inline_warning: float | None = 0.05
#: The callables reported so far (by name), each once; bounded, then no more are reported.
_reported: set[str] = set()
_MAX_REPORTED: Final = 10_000

#: Worker threads all tools of one trio run may occupy at once, unless a tool brings its own
#: limiter. Matches trio's own default thread limit.
DEFAULT_TOOL_THREADS: Final = 40

_TOOL_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar(
    "lionexec.tool_limiter"
)


def current_tool_limiter() -> trio.CapacityLimiter:
    """The limiter shared by every tool without one of its own, in the current trio run.

    It holds :data:`DEFAULT_TOOL_THREADS` tokens and is separate from trio's default thread
    limiter, so tools cannot starve other ``trio.to_thread`` users (or the reverse). Like any
    trio object it belongs to one run, so it is created per run on first use; adjust
    ``total_tokens`` on it to resize.
    """
    try:
        return _TOOL_LIMITER.get()
    except LookupError:
        limiter = trio.CapacityLimiter(DEFAULT_TOOL_THREADS)
        _TOOL_LIMITER.set(limiter)
        return limiter


def is_async_callable(obj: object) -> bool:
    """Whether calling *obj* returns a coroutine, judged from its declaration.

    Sees through :func:`functools.partial` and recognises ``async def`` functions, bound
    async methods and objects whose ``__call__`` is ``async def``.
    """
    while isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.iscoroutinefunction(obj):
        return True
    if isinstance(obj, type) or inspect.isfunction(obj) or inspect.ismethod(obj):
        return False
    return inspect.iscoroutinefunction(getattr(obj, "__call__", None))  # noqa: B004


async def run_callable(
    fn: Callable[..., Any],
    declared_async: bool,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    inline: bool = False,
    limiter: trio.CapacityLimiter | None = None,
    name: str | None = None,
) -> Any:
    """Call *fn* per the sync policy (see the module); return its result, awaited if awaitable.

    Async-declared callables run on the trio thread; sync ones in a worker thread under
    *limiter* (by default :func:`current_tool_limiter`), or on the trio thread when *inline*:
    one that holds the thread longer than :func:`set_inline_warning` allows (50 ms by
    default) is reported once, a warning on the ``lionexec`` logger naming it (*name*, a
    tool's name, else its qualified name) and how long it held the loop.
    A cancelled offload is abandoned at once: the thread keeps its limiter token until it
    really returns, and its result is dropped.
    """
    if declared_async:
        # the common case, once per call: a plain coroutine, awaited directly
        result = fn(*args, **kwargs)
    elif inline:
        await trio.lowlevel.checkpoint()  # trio's rule: a public coroutine always yields
        started = time.perf_counter()  # (the thread's real time: trio's clock may be a mock)
        result = fn(*args, **kwargs)
        held = time.perf_counter() - started
        if _inline_warning is not None and held > _inline_warning:
            _report_inline(fn, name, held)
    else:
        (result,) = await trio.to_thread.run_sync(
            functools.partial(_boxed, fn, args, kwargs),
            abandon_on_cancel=True,
            limiter=limiter if limiter is not None else current_tool_limiter(),
        )
    if inspect.isawaitable(result):
        result = await result
    return result


def set_inline_warning(seconds: float | None) -> float | None:
    """Report an inline sync callable (``Tool(inline=True)``) that holds the trio thread
    longer than *seconds* (``None``: never report); returns the previous setting.

    The report is a warning on the ``lionexec`` logger naming the tool and how long one call
    held the event loop, once per tool per process: everything else on the loop (timeouts,
    cancellation, other calls) waited that long. Such a tool should run in a worker thread
    (drop ``inline``) or be made async. The default is 0.05 (50 ms). Process-wide; never
    blocks.
    """
    global _inline_warning
    if seconds is not None and (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds < 0
    ):
        raise ValueError(f"seconds must be a finite number >= 0 or None, got {seconds!r}")
    previous, _inline_warning = _inline_warning, seconds
    return previous


def _report_inline(fn: Callable[..., Any], name: str | None, held: float) -> None:
    """Warn, once per callable, that *fn* held the trio thread *held* seconds."""
    if name is None:
        name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    if name in _reported or len(_reported) >= _MAX_REPORTED:
        return
    _reported.add(name)
    _log.warning(
        "inline tool %r held the trio thread for %.3f s (over %.3f s): everything else on "
        "the event loop waited; drop inline=True (a worker thread runs it) or make it async "
        "(reported once per tool)",
        name,
        held,
        _inline_warning,
    )


def _boxed(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any]:
    """Call *fn* in a worker thread; boxed so trio lets a returned coroutine through."""
    return (fn(*args, **kwargs),)
