"""Running many calls: one fan-out, one throttle, one retry policy.

Both :meth:`Branch.act` and :func:`~lionexec.act.alcall` run their items through
:func:`fan_out`, pace starts with a :class:`Throttle`, and space retries with
:class:`RetryPolicy`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import attrs
import trio

from lionexec.errors import ConfigurationError

__all__ = ["RetryPolicy", "Throttle", "fan_out"]

T = TypeVar("T")
R = TypeVar("R")


def _finite(name: str, *, minimum: float, inclusive: bool = True) -> Callable[..., None]:
    def check(_instance: Any, _attribute: Any, value: Any) -> None:
        ok = (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        )
        if not ok or value < minimum or (value == minimum and not inclusive):
            bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
            raise ConfigurationError(f"{name} must be a finite number {bound}, got {value!r}")

    return check


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How long to wait before each retry: capped exponential backoff with jitter.

    The wait before retry *n* (from 0) is ``min(max_delay, initial_delay * backoff**n)``
    plus a uniformly random ``[0, jitter]`` seconds (as in stamina: jitter spreads the retries
    of many callers that failed together).

    Attributes:
        attempts: extra attempts after a failed one (0: no retry).
        initial_delay: seconds before the first retry.
        backoff: each later delay is the previous one times this factor (> 0).
        max_delay: no delay (before jitter) exceeds this.
        jitter: up to this many random seconds are added to each delay.
    """

    attempts: int = attrs.field(default=0)
    initial_delay: float = attrs.field(default=0.0, validator=_finite("initial_delay", minimum=0))
    backoff: float = attrs.field(
        default=1.0, validator=_finite("backoff", minimum=0, inclusive=False)
    )
    max_delay: float = attrs.field(default=30.0, validator=_finite("max_delay", minimum=0))
    jitter: float = attrs.field(default=0.0, validator=_finite("jitter", minimum=0))

    @attempts.validator
    def _check_attempts(self, _attribute: Any, value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigurationError(f"retry attempts must be an int >= 0, got {value!r}")

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number *retry* (counting from 0)."""
        base = 0.0
        if self.initial_delay:
            try:  # (as floats: an int backoff's power would be exact, and unbounded)
                base = self.initial_delay * float(self.backoff) ** min(retry, 1024)
            except OverflowError:  # past any max_delay
                base = math.inf
        wait = min(self.max_delay, base)
        if self.jitter:
            wait += random.uniform(0, self.jitter)
        return float(wait)


class Throttle:
    """Spaces the starts of consecutive calls at least *period* seconds apart (trio's clock)."""

    __slots__ = ("_last", "period")

    def __init__(self, period: float | None) -> None:
        self.period = period or 0.0
        self._last: float | None = None

    async def wait(self) -> None:
        """Wait until the next call may start; the first one starts at once. A checkpoint."""
        now = trio.current_time()
        if self._last is not None and self.period:
            await trio.sleep_until(self._last + self.period)
            now = trio.current_time()
        else:
            await trio.lowlevel.checkpoint()
        self._last = now


#: The loop that starts a concurrent batch checkpoints after this many starts.
_SPAWN_CHECKPOINT_EVERY = 64


async def fan_out(
    func: Callable[[int, T], Awaitable[R]],
    items: Sequence[T],
    *,
    max_concurrent: int | None = None,
    throttle_period: float | None = None,
    return_exceptions: bool = False,
    limiter: trio.CapacityLimiter | None = None,
) -> list[R | Exception]:
    """Run ``func(index, item)`` for every item; results in input order.

    Calls start in input order: with *max_concurrent* (or a shared *limiter*: a call holds one
    of its tokens while it runs), the next one starts when a running one finishes; with
    *throttle_period*, at least that many seconds after the previous start. With
    ``max_concurrent=1`` (a sequential batch) the calls run one after another in this task,
    each after a checkpoint (so the batch yields, and can be cancelled, between calls, even
    when *func* never waits); otherwise each runs in its own task of one nursery, and the
    loop that starts them checkpoints every 64 starts.

    An ordinary exception from one call stops the batch (the running calls are cancelled, the
    rest never start) and is raised (unwrapped from its exception group when it is the only
    one), unless *return_exceptions* puts it in its slot. Cancellation of the caller cancels
    every call and propagates.
    """
    if not items:
        await trio.lowlevel.checkpoint()
        return []
    results: list[Any] = [None] * len(items)
    throttle = Throttle(throttle_period) if throttle_period else None
    if max_concurrent == 1 or len(items) == 1:
        # One after another in this task, each after a checkpoint: the batch yields between
        # calls, and *func* need not (a call's transaction does not: one scheduler step per
        # call, not two, in a sequential batch). A throttle's wait, or taking the limiter's
        # token, is that checkpoint.
        for index, item in enumerate(items):
            try:
                if limiter is None:
                    if throttle is not None:
                        await throttle.wait()
                    else:
                        await trio.lowlevel.checkpoint()
                    results[index] = await func(index, item)
                else:
                    async with limiter:  # the token first: the throttle spaces real starts
                        if throttle is not None:
                            await throttle.wait()
                        results[index] = await func(index, item)
            except Exception as exc:
                if not return_exceptions:
                    raise
                results[index] = exc
        return results

    caps = [trio.CapacityLimiter(max_concurrent)] if max_concurrent else []
    if limiter is not None:
        caps.append(limiter)
    await _concurrently(func, items, results, caps, throttle, return_exceptions)
    return results


@trio.lowlevel.enable_ki_protection
async def _concurrently(
    func: Callable[[int, T], Awaitable[R]],
    items: Sequence[T],
    results: list[Any],
    caps: list[trio.CapacityLimiter],
    throttle: Throttle | None,
    return_exceptions: bool,
) -> None:
    """:func:`fan_out`'s concurrent path: one task per call, in one nursery.

    KI-protected, so a ``KeyboardInterrupt`` cannot land between the bytecodes of the
    ``async with`` and leave the nursery never exited (trio would be corrupted: seen by the
    real-SIGINT soak, ``tests/act/test_ki_signals.py``). Trio delivers it at the nursery's wait
    instead, as to any protected code. The calls run in tasks of their own, unprotected.
    """

    async def run(index: int, item: T) -> None:
        try:
            results[index] = await func(index, item)
        except Exception as exc:
            if not return_exceptions:
                raise
            results[index] = exc

    async def run_holding(index: int, item: T, token: object) -> None:
        try:
            await run(index, item)
        finally:
            for cap in caps:
                cap.release_on_behalf_of(token)

    try:
        async with trio.open_nursery() as nursery:
            for index, item in enumerate(items):
                if not caps:  # no token to hold (the usual batch: no limiter, no cap)
                    if throttle is not None:
                        await throttle.wait()
                    elif index % _SPAWN_CHECKPOINT_EVERY == _SPAWN_CHECKPOINT_EVERY - 1:
                        await trio.lowlevel.checkpoint()  # a long spawning loop lets others run
                    nursery.start_soon(run, index, item)
                    continue
                token = object()
                taken: list[trio.CapacityLimiter] = []
                try:
                    for cap in caps:  # taken here, so calls start in input order
                        await cap.acquire_on_behalf_of(token)
                        taken.append(cap)
                    if throttle is not None:  # after the tokens: it spaces the real starts
                        await throttle.wait()
                except BaseException:  # cancelled before the call started: give them back
                    for cap in taken:
                        cap.release_on_behalf_of(token)
                    raise
                nursery.start_soon(run_holding, index, item, token)
    except BaseExceptionGroup as group:
        raise _unwrap(group) from None


@trio.lowlevel.enable_ki_protection
async def spawn_each(
    func: Callable[..., Awaitable[object]], items: Sequence[T], *args: object
) -> None:
    """``func(item, *args)`` for every item, each in its own task of one nursery: the
    concurrent path of :func:`fan_out` without a cap, a throttle, a limiter or
    *return_exceptions*, for a *func* that keeps its own result (no slot to fill: one
    coroutine fewer per item). Starts in input order, checkpointing every 64 starts.

    An exception from one call cancels the others and is raised as :func:`fan_out` raises
    it; cancellation of the caller cancels every call and propagates. KI-protected, as
    :func:`_concurrently` is (the calls' tasks are not).
    """
    try:
        async with trio.open_nursery() as nursery:
            for index, item in enumerate(items):
                if index % _SPAWN_CHECKPOINT_EVERY == _SPAWN_CHECKPOINT_EVERY - 1:
                    await trio.lowlevel.checkpoint()  # a long spawning loop lets others run
                nursery.start_soon(func, item, *args)
    except BaseExceptionGroup as group:
        raise _unwrap(group) from None


def _unwrap(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What a caller of a fan-out should see of its nursery's exception group.

    The only non-cancellation exception (a call's own exception group included), ignoring the
    siblings' ``trio.Cancelled``; or one
    ``trio.Cancelled`` when cancellation is all there is (the caller was cancelled); otherwise
    the group itself.
    """
    cancelled, rest = group.split(trio.Cancelled)
    if rest is None and cancelled is not None:
        return _first_leaf(cancelled)
    if rest is not None and len(rest.exceptions) == 1:
        return rest.exceptions[0]  # even a tool's own ExceptionGroup: as in sequential mode
    return group


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
