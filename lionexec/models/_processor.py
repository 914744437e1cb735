"""``RateLimitedProcessor``: a processor whose events over a rate budget are deferred, not lost."""

from __future__ import annotations

import math
import weakref
from typing import Any

import attrs
import trio

from lionexec.engine import Event, EventStatus, Processor, ProcessorStatistics
from lionexec.limits import BudgetExceededError, RateLimiter, RateLimiterStatistics

__all__ = ["RateLimitedProcessor", "RateLimitedStatistics"]


@attrs.frozen
class RateLimitedStatistics(ProcessorStatistics):
    """A snapshot of a :class:`RateLimitedProcessor`: every :class:`ProcessorStatistics` field
    (queue, capacity, outcomes, ``deferrals``) plus its budgets."""

    limits: RateLimiterStatistics
    """The limiter's budgets and counters."""
    deferred: int
    """Events in the queue waiting for a not-before time."""
    next_not_before: float | None
    """The earliest not-before time (trio's clock) of a deferred event, or ``None``."""


class RateLimitedProcessor(Processor):
    """A :class:`~lionexec.engine.Processor` that asks a :class:`RateLimiter` before each event.

    Every event is charged one request and ``event.request["cost"]`` tokens (``0`` if it has
    no cost; a :class:`~lionexec.models.ModelCall` costs its token estimate). An event the
    limiter refuses for now is **deferred**, neither waited for nor dropped: it goes back to
    the queue, still pending, with a not-before time, and is checked again no earlier than
    that. Nothing is lost and nothing spins: when every queued event is deferred,
    :meth:`execute` and :meth:`join` sleep until the earliest not-before time (or, for
    :meth:`execute`, the next enqueue or :meth:`stop`).

    An event whose cost could never be granted (above the token burst) is **denied**: it ends
    ``skipped`` with a :class:`BudgetExceededError` recorded on it.

    Deferred events keep their order while one cycle runs at a time (the service's); cycles
    that overlap (a :meth:`process` call beside the service) may let one overtake another.
    Each wake-up checks every waiting event once (the base class's deferral lap), so the
    cost of a wake-up grows with the queue.

    A granted event that has a ``grant(limiter)`` method (a ``ModelCall``) is told so; it then
    reports provider feedback (``429``, ``x-ratelimit-*``) and actual usage to the limiter.

    Args:
        limiter: the budgets (shared with other processors if you like).
        queue_capacity, capacity_refresh_time, concurrency_limit, max_queue_size: as for
            :class:`~lionexec.engine.Processor`.
    """

    __slots__ = ("_last_refusal", "_not_before", "_rate_limiter")

    def __init__(
        self,
        limiter: RateLimiter,
        *,
        queue_capacity: int = 100,
        capacity_refresh_time: float = 0.01,
        concurrency_limit: int | None = None,
        max_queue_size: int = 0,
    ) -> None:
        super().__init__(queue_capacity, capacity_refresh_time, concurrency_limit, max_queue_size)
        self._rate_limiter = limiter
        self._not_before: weakref.WeakKeyDictionary[Event, float] = weakref.WeakKeyDictionary()
        self._last_refusal: float | BudgetExceededError = 0.0

    @property
    def limiter(self) -> RateLimiter:
        """The limiter consulted before each event."""
        return self._rate_limiter

    # -- permission -------------------------------------------------------------------------

    async def request_permission(self, *, cost: int = 0, call: Any = None, **_: Any) -> bool:
        """Grant the event if the limiter has one request and *cost* tokens now.

        Synchronous bookkeeping and a checkpoint; never waits for the budget.
        """
        await trio.lowlevel.checkpoint()
        try:
            wait = self._rate_limiter.try_acquire(cost)
        except BudgetExceededError as exc:
            self._last_refusal = exc
            return False
        if wait:
            self._last_refusal = wait
            return False
        grant = getattr(call, "grant", None)
        if grant is not None:
            grant(self._rate_limiter)
        return True

    async def handle_denied(self, event: Event) -> bool:
        """Defer an event refused for now; deny (``skipped``) one that can never be granted.

        Synchronous bookkeeping, and not a checkpoint: it always follows
        :meth:`request_permission` (a checkpoint) for the same event, so a deferral lap over a
        long queue costs one checkpoint per event, not two.
        """
        refusal = self._last_refusal
        if isinstance(refusal, BudgetExceededError):
            event.execution.add_error(refusal)
            event.status = EventStatus.SKIPPED
            self._not_before.pop(event, None)
            return True
        self._not_before[event] = trio.current_time() + refusal
        return False

    def _granted(self, event: Event) -> None:
        self._not_before.pop(event, None)  # no longer deferred

    def _ungranted(self, event: Event) -> None:
        # granted, never sent (put back, or cancelled by its caller): the limiter's again
        cost = event.request.get("cost", 0)
        self._rate_limiter.refund(cost)
        ungrant = getattr(event.request.get("call"), "ungrant", None)
        if ungrant is not None:
            ungrant()

    def _next_not_before(self) -> float | None:
        earliest = math.inf
        for event, when in list(self._not_before.items()):
            if event.execution.status is not EventStatus.PENDING:
                del self._not_before[event]
            elif when < earliest:
                earliest = when
        return None if earliest == math.inf else earliest

    def _idle_until(self) -> float:
        """After a cycle that took nothing: the earliest not-before time of a deferred event
        still ahead (``capacity_refresh_time`` from now if none is, e.g. when other cycles
        hold the capacity: a time already passed would wake the cycle at once, again and
        again); with nothing queued, only the next enqueue or :meth:`stop` (never polling
        deferred events)."""
        if not self._queue:
            return math.inf
        earliest, now = self._next_not_before(), trio.current_time()
        if earliest is None or earliest <= now:
            return now + self.capacity_refresh_time
        return earliest

    # -- statistics -------------------------------------------------------------------------

    def statistics(self) -> RateLimitedStatistics:
        """Return a :class:`RateLimitedStatistics` snapshot (processor and budgets)."""
        earliest = self._next_not_before()
        return RateLimitedStatistics(
            **attrs.asdict(super().statistics(), recurse=False),
            limits=self._rate_limiter.statistics(),
            deferred=len(self._not_before),
            next_not_before=earliest,
        )
