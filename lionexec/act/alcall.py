"""Structured fan-out on trio: ``alcall`` and its frozen parameter object.

``alcall(func, inputs, params)`` applies an async function to every input concurrently, in a
nursery, and returns the results in input order. The act layer uses the same fan-out for
``Branch.act`` batches; retries and timeouts there run inside each call's transaction instead.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import attrs
import trio

from lionexec.errors import ConfigurationError

__all__ = ["AlcallParams", "alcall", "fan_out"]

T = TypeVar("T")
R = TypeVar("R")


def _optional_positive(name: str, *, allow_zero: bool = False) -> Callable[[Any, Any, Any], None]:
    def check(_instance: Any, _attribute: Any, value: Any) -> None:
        if value is None:
            return
        ok = (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        )
        if not ok or value < 0 or (value == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise ConfigurationError(
                f"{name} must be None or a finite number {bound}, got {value!r}"
            )

    return check


def _non_negative_int(_instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"{attribute.name} must be an int >= 0, got {value!r}")


def _max_concurrent(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigurationError(f"max_concurrent must be None or an int >= 1, got {value!r}")


@attrs.frozen(kw_only=True)
class AlcallParams:
    """How a batch of calls is run.

    Attributes:
        max_concurrent: at most this many calls run at once (a ``trio.CapacityLimiter``);
            ``None`` means no cap.
        throttle_period: seconds to wait between starting one call and the next.
        timeout: seconds one attempt may take. ``alcall`` raises ``trio.TooSlowError`` for an
            attempt that runs over; ``Branch.act`` records a ``timed_out`` response instead.
        retry_attempts: extra attempts after a failed one (0: each call runs once).
        retry_initial_delay: seconds before the first retry.
        retry_backoff: each later delay is the previous one times this factor.
        force_retry: ``Branch.act`` retries only tools declared idempotent unless this is set.
        return_exceptions: keep a raised failure in its result slot instead of raising it
            (and cancelling the calls still running).
    """

    max_concurrent: int | None = attrs.field(default=None, validator=_max_concurrent)
    throttle_period: float | None = attrs.field(
        default=None, validator=_optional_positive("throttle_period", allow_zero=True)
    )
    timeout: float | None = attrs.field(default=None, validator=_optional_positive("timeout"))
    retry_attempts: int = attrs.field(default=0, validator=_non_negative_int)
    retry_initial_delay: float = attrs.field(
        default=0.0, validator=_optional_positive("retry_initial_delay", allow_zero=True)
    )
    retry_backoff: float = attrs.field(default=1.0, validator=_optional_positive("retry_backoff"))
    force_retry: bool = False
    return_exceptions: bool = False

    def retry_delay(self, retry: int) -> float:
        """Seconds to wait before retry number *retry* (counting from 0)."""
        return float(self.retry_initial_delay * self.retry_backoff**retry)


async def fan_out(
    func: Callable[[int, T], Awaitable[R]],
    items: Sequence[T],
    *,
    max_concurrent: int | None = None,
    throttle_period: float | None = None,
    return_exceptions: bool = False,
) -> list[R | Exception]:
    """Run ``func(index, item)`` for every item in one nursery; results in input order.

    Calls start in input order: with *max_concurrent*, the next one starts when a running one
    finishes; with *throttle_period*, at least that many seconds after the previous start.

    An ordinary exception from one call cancels the others and is raised (unwrapped from its
    exception group when it is the only one), unless *return_exceptions* puts it in its slot.
    Cancellation of the caller cancels every call and propagates.
    """
    results: list[Any] = [None] * len(items)
    limiter = trio.CapacityLimiter(max_concurrent) if max_concurrent else None

    async def run(index: int, item: T) -> None:
        try:
            results[index] = await func(index, item)
        except Exception as exc:
            if not return_exceptions:
                raise
            results[index] = exc
        finally:
            if limiter is not None:
                limiter.release_on_behalf_of(index)

    try:
        async with trio.open_nursery() as nursery:
            for index, item in enumerate(items):
                if index and throttle_period:
                    await trio.sleep(throttle_period)
                if limiter is not None:  # taken here, so calls start in input order
                    await limiter.acquire_on_behalf_of(index)
                nursery.start_soon(run, index, item)
    except BaseExceptionGroup as group:
        raise _unwrap(group) from None
    return results


def _unwrap(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """What a caller of a fan-out should see of its nursery's exception group.

    The only non-cancellation exception, ignoring the siblings' ``trio.Cancelled``; or one
    ``trio.Cancelled`` when cancellation is all there is (the caller was cancelled); otherwise
    the group itself.
    """
    cancelled, rest = group.split(trio.Cancelled)
    if rest is None and cancelled is not None:
        return _first_leaf(cancelled)
    if rest is not None and len(rest.exceptions) == 1:
        only = rest.exceptions[0]
        if not isinstance(only, BaseExceptionGroup):
            return only
    return group


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


async def alcall(
    func: Callable[[T], Awaitable[R]],
    inputs: Iterable[T],
    params: AlcallParams | None = None,
) -> list[R | Exception]:
    """Apply *func* to every input concurrently under *params*; results in input order.

    Each input gets ``1 + retry_attempts`` attempts at most, each bounded by ``timeout``
    (``trio.TooSlowError`` when it runs over). ``trio.Cancelled`` is never retried.

    Cancellation: cancelling the caller cancels every call still running and propagates.
    """
    params = params or AlcallParams()

    async def attempt(_index: int, item: T) -> R:
        retry = 0
        while True:
            try:
                if params.timeout is None:
                    return await func(item)
                with trio.fail_after(params.timeout):
                    return await func(item)
            except Exception:
                if retry >= params.retry_attempts:
                    raise
            await trio.sleep(params.retry_delay(retry))
            retry += 1

    return await fan_out(
        attempt,
        list(inputs),
        max_concurrent=params.max_concurrent,
        throttle_period=params.throttle_period,
        return_exceptions=params.return_exceptions,
    )
