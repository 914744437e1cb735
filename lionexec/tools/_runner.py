"""How a tool's callables run: async ones on the trio thread, sync ones in a worker thread.

This is lionexec's sync policy, shared by tools and :func:`~lionexec.act.alcall`: a sync
callable never blocks the event loop unless it opts into ``inline``, and an awaitable that
any callable returns is awaited, never handed back as the result.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Final

import trio

__all__ = [
    "DEFAULT_TOOL_THREADS",
    "current_tool_limiter",
    "is_async_callable",
    "run_callable",
]

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
) -> Any:
    """Call *fn* per the sync policy (see the module); return its result, awaited if awaitable.

    Async-declared callables run on the trio thread; sync ones in a worker thread under
    *limiter* (by default :func:`current_tool_limiter`), or on the trio thread when *inline*.
    A cancelled offload is abandoned at once: the thread keeps its limiter token until it
    really returns, and its result is dropped.
    """
    if declared_async:
        # the common case, once per call: a plain coroutine, awaited directly
        result = fn(*args, **kwargs)
    elif inline:
        await trio.lowlevel.checkpoint()  # trio's rule: a public coroutine always yields
        result = fn(*args, **kwargs)
    else:
        (result,) = await trio.to_thread.run_sync(
            functools.partial(_boxed, fn, args, kwargs),
            abandon_on_cancel=True,
            limiter=limiter if limiter is not None else current_tool_limiter(),
        )
    if inspect.isawaitable(result):
        result = await result
    return result


def _boxed(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any]:
    """Call *fn* in a worker thread; boxed so trio lets a returned coroutine through."""
    return (fn(*args, **kwargs),)
