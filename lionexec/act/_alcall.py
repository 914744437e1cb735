"""``alcall`` and the frozen parameters of a batch (:class:`AlcallParams`).

``alcall(func, inputs, params)`` applies a function to every input concurrently and returns
the results in input order. ``Branch.act`` batches run on the same fan-out
(``fan_out``, in :mod:`lionexec.act._batch`); their retries and timeouts run inside each call's
transaction instead.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar

import attrs
import trio

from lionexec.errors import ConfigurationError, require_trio
from lionexec.tools import is_async_callable, run_callable

from ._batch import RetryPolicy, fan_out

__all__ = ["DEFAULT_PARAMS", "AlcallParams", "alcall"]

T = TypeVar("T")
R = TypeVar("R")
if TYPE_CHECKING:  # (a TypeVar default: typing has it from Python 3.13)
    from typing_extensions import TypeVar as _DefaultedTypeVar

    #: Whether a batch's raised failures are kept in their slots, as a type: ``act()``'s
    #: result holds exceptions only for ``AlcallParams(return_exceptions=True)``.
    ReturnExceptions = _DefaultedTypeVar(
        "ReturnExceptions", bound=bool, default=Literal[False], covariant=True
    )
else:
    ReturnExceptions = TypeVar("ReturnExceptions", bound=bool, covariant=True)


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
class AlcallParams(Generic[ReturnExceptions]):
    """How a batch of calls is run.

    Generic in :attr:`return_exceptions` for type checkers only: ``AlcallParams(...)`` is an
    ``AlcallParams[Literal[False]]`` unless ``return_exceptions`` is passed, and
    ``Branch.act`` is typed ``list[ActionResponse]`` for it (``list[ActionResponse |
    Exception]`` otherwise).

    Attributes:
        max_concurrent: at most this many calls run at once (a ``trio.CapacityLimiter``);
            ``None`` means no cap.
        throttle_period: seconds to wait between starting one call and the next.
        timeout: seconds one attempt may take. ``alcall`` raises ``trio.TooSlowError`` for an
            attempt that runs over; ``Branch.act`` records a ``timed_out`` response instead.
        call_timeout: seconds one whole call may take in ``Branch.act``, every phase included
            (gate, escalation, hooks, transform, every attempt and the waits between them);
            over it the call is recorded ``timed_out`` and the error names the phase. ``None``:
            no bound.
        retry_attempts: extra attempts after a failed one (0: each call runs once).
        retry_initial_delay: seconds before the first retry.
        retry_backoff: each later delay is the previous one times this factor.
        retry_max_delay: no wait between attempts (before jitter) is longer than this.
        retry_jitter: up to this many random seconds are added to each wait.
        force_retry: ``Branch.act`` retries only tools declared idempotent unless this is set.
        return_exceptions: keep a raised failure in its result slot instead of raising it
            (and cancelling the calls still running).
    """

    max_concurrent: int | None = attrs.field(default=None, validator=_max_concurrent)
    throttle_period: float | None = attrs.field(
        default=None, validator=_optional_positive("throttle_period", allow_zero=True)
    )
    timeout: float | None = attrs.field(default=None, validator=_optional_positive("timeout"))
    call_timeout: float | None = attrs.field(
        default=None, validator=_optional_positive("call_timeout")
    )
    retry_attempts: int = attrs.field(default=0, validator=_non_negative_int)
    retry_initial_delay: float = attrs.field(
        default=0.0, validator=_optional_positive("retry_initial_delay", allow_zero=True)
    )
    retry_backoff: float = attrs.field(default=1.0, validator=_optional_positive("retry_backoff"))
    retry_max_delay: float = attrs.field(
        default=30.0, validator=_optional_positive("retry_max_delay", allow_zero=True)
    )
    retry_jitter: float = attrs.field(
        default=0.0, validator=_optional_positive("retry_jitter", allow_zero=True)
    )
    force_retry: bool = False
    return_exceptions: ReturnExceptions = False  # type: ignore[assignment]  # (the default's type)
    #: The retry schedule these parameters describe.
    retry: RetryPolicy = attrs.field(init=False, repr=False, eq=False)

    @retry.default
    def _retry(self) -> RetryPolicy:
        return RetryPolicy(
            attempts=self.retry_attempts,
            initial_delay=self.retry_initial_delay,
            backoff=self.retry_backoff,
            max_delay=self.retry_max_delay,
            jitter=self.retry_jitter,
        )

    def retry_delay(self, retry: int) -> float:
        """Seconds to wait before retry number *retry* (counting from 0)."""
        return self.retry.delay(retry)


#: The parameters of a batch that passes none (shared: the object is immutable).
DEFAULT_PARAMS: Final[AlcallParams[Literal[False]]] = AlcallParams()


async def alcall(
    func: Callable[[T], Awaitable[R]] | Callable[[T], R],
    inputs: Iterable[T],
    params: AlcallParams[bool] | None = None,
) -> list[R | Exception]:
    """Apply *func* to every input concurrently under *params*; results in input order.

    *func* may be ``async`` or plain: a plain (sync) function runs in a worker thread under
    :func:`~lionexec.tools.current_tool_limiter`, as tools do (one sync policy for every
    callable lionexec runs: the event loop never waits on a plain function), and an awaitable
    it returns is awaited. Each input gets ``1 + retry_attempts`` attempts at most, each
    bounded by ``timeout`` (``trio.TooSlowError`` when it runs over), spaced by the
    parameters' :class:`RetryPolicy`. ``trio.Cancelled`` is never retried.

    Cancellation: cancelling the caller cancels every call still running and propagates.

    Raises:
        NotInTrioError: called outside a trio run (say, under ``asyncio.run``).
    """
    require_trio("alcall()")
    await trio.lowlevel.checkpoint()  # *func* need not yield; alcall always does
    params = params or DEFAULT_PARAMS
    declared_async = is_async_callable(func)

    async def attempt(_index: int, item: T) -> R:
        retry = 0
        while True:
            try:
                with trio.fail_after(params.timeout) if params.timeout else nullcontext():
                    result: R = await run_callable(func, declared_async, (item,), {})
                    return result
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
