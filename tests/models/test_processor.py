"""RateLimitedProcessor: deferral with a not-before time (never lost, never spinning)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

from lionexec.engine import Event, EventStatus, ProcessorStatistics
from lionexec.limits import BudgetExceededError, RateLimiter
from lionexec.models import (
    Endpoint,
    ModelCall,
    RateLimitedProcessor,
    RateLimitedStatistics,
)
from lionexec.models.testing import LocalProvider, Reply


@attrs.define(kw_only=True, eq=False)
class Work(Event):
    cost: int = 0
    started: float | None = None

    @property
    def request(self) -> dict[str, Any]:
        return {"cost": self.cost}

    async def _invoke(self) -> float:
        self.started = trio.current_time()
        await trio.lowlevel.checkpoint()
        return self.started


def max_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    return max(sum(1 for t in times[i:] if t <= start + window) for i, start in enumerate(times))


async def test_join_defers_over_budget_events_and_runs_them_all(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = RateLimitedProcessor(RateLimiter(requests=5, period=1.0, burst=2))
    events = [Work() for _ in range(12)]
    for event in events:
        await processor.enqueue(event)
    start = trio.current_time()
    await processor.join()
    assert all(e.status is EventStatus.COMPLETED for e in events)
    times = [e.started - start for e in events if e.started is not None]
    # Burst of two at once, then one per 0.2 s, in enqueue order.
    assert times == sorted(times)
    assert times[:2] == [0.0, 0.0]
    assert times[-1] == pytest.approx(2.0)
    assert max_in_window(times, 0.5) <= 2 + 2  # burst + 0.5 s * 5/s, floored
    stats = processor.statistics()
    assert stats.completed == 12 and stats.queued == 0
    # Each wake-up checks each waiting event at most twice (the cycle that runs one, and the
    # lap that finds the rest deferred); nothing is checked between not-before times.
    assert 0 < stats.deferrals <= 2 * (12 * 11 // 2)


async def test_the_service_sleeps_until_the_earliest_not_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = RateLimiter(requests=1, period=10.0)
    processor = RateLimitedProcessor(limiter, capacity_refresh_time=0.001)
    async with trio.open_nursery() as nursery:
        await nursery.start(processor.execute)
        first, second = Work(), Work()
        await processor.enqueue(first)
        await processor.enqueue(second)
        await first.wait_completed()
        await trio.sleep(1.0)  # MockClock: virtual time
        stats = processor.statistics()
        assert isinstance(stats, RateLimitedStatistics)
        assert isinstance(stats, ProcessorStatistics)
        assert stats.deferred == 1 and stats.next_not_before == pytest.approx(10.0, abs=0.01)
        assert stats.limits.requests_available == 0
        refused = stats.limits.refused
        await second.wait_completed()
        assert second.started == pytest.approx(first.started + 10.0)  # type: ignore[operator]
        # Asked again only when due: one refusal then the grant, not one per refresh.
        assert processor.statistics().limits.refused == refused
        processor.stop()


async def test_token_budget_defers_and_usage_is_charged(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = RateLimitedProcessor(RateLimiter(tokens=100, period=1.0))
    events = [Work(cost=60) for _ in range(3)]
    for event in events:
        await processor.enqueue(event)
    await processor.join()
    starts = [e.started for e in events]
    assert starts[1] == pytest.approx(starts[0] + 0.2)  # type: ignore[operator]
    assert starts[2] == pytest.approx(starts[1] + 0.6)  # type: ignore[operator]
    assert processor.statistics().limits.tokens_charged == 180


async def test_a_cost_that_can_never_be_granted_is_denied_with_a_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = RateLimitedProcessor(RateLimiter(tokens=100, period=1.0))
    huge, fine = Work(cost=1000), Work(cost=1)
    await processor.enqueue(huge)
    await processor.enqueue(fine)
    await processor.join()
    assert huge.status is EventStatus.SKIPPED
    assert isinstance(huge.execution.error, BudgetExceededError)
    assert fine.status is EventStatus.COMPLETED
    assert processor.statistics().skipped == 1


async def test_cancelled_join_leaves_deferred_events_pending_in_the_queue(
    autojump_clock: trio.testing.MockClock,
) -> None:
    processor = RateLimitedProcessor(RateLimiter(requests=1, period=100.0))
    events = [Work() for _ in range(3)]
    for event in events:
        await processor.enqueue(event)
    with trio.move_on_after(1.0):
        await processor.join()
    assert [e.status for e in events] == [EventStatus.COMPLETED] + [EventStatus.PENDING] * 2
    assert processor.statistics().queued == 2  # nothing lost


async def test_a_429_burst_is_deferred_and_every_request_completes() -> None:
    """The provider allows 40/s with a burst of 2; the client believes it may send 1000/s.

    Every 429 pauses the shared limiter for the provider's retry-after, the refused call is
    retried and the queued ones are deferred; all complete, none is lost or sent twice
    successfully.
    """
    provider = LocalProvider(
        default=Reply(text="ok"), limiter=RateLimiter(requests=40, period=1.0, burst=2)
    )
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        limiter = RateLimiter(requests=1000, period=1.0)
        processor = RateLimitedProcessor(limiter, concurrency_limit=8)
        await nursery.start(processor.execute)
        endpoint = Endpoint(base_url)
        calls = [
            ModelCall(
                endpoint=endpoint,
                payload={"model": "m", "messages": [{"role": "user", "content": str(i)}]},
                rate_limit_retries=50,
            )
            for i in range(10)
        ]
        for call in calls:
            await processor.enqueue(call)
        with trio.fail_after(30):
            for call in calls:
                await call.wait_completed()
        processor.stop()
        nursery.cancel_scope.cancel()
    assert all(c.status is EventStatus.COMPLETED for c in calls), [
        c.execution.error for c in calls
    ]
    statuses = provider.log.statuses
    assert statuses.count(200) == 10
    assert statuses.count(429) >= 1
    assert limiter.statistics().provider_pauses >= 1
    assert sum(c.attempts for c in calls) == len(statuses)


async def test_an_executor_can_own_a_rate_limited_processor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from typing import ClassVar

    from lionexec.engine import Executor, Processor

    class LimitedExecutor(Executor):
        processor_type: ClassVar[type[Processor]] = RateLimitedProcessor

    limiter = RateLimiter(requests=2, period=1.0, burst=1)
    executor = LimitedExecutor(processor_config={"limiter": limiter})
    events = [Work() for _ in range(4)]
    async with executor.running():
        for event in events:
            executor.append(event)
        await executor.forward()
        for event in events:
            await event.wait_completed()
    # forward()'s cycle overlaps the service's, so deferred events may swap places; the
    # rate holds either way.
    assert sorted(e.started for e in events) == pytest.approx([0.0, 0.5, 1.0, 1.5])  # type: ignore[type-var]
    assert limiter.statistics().granted == 4


async def test_a_granted_event_waiting_for_a_token_is_no_longer_deferred(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Its old not-before time made join() spin at one clock time, and deferred over-count.
    checks = 0

    class Job(Event):
        def __init__(self, seconds: float) -> None:
            super().__init__()
            self.seconds = seconds

        async def _invoke(self) -> None:
            await trio.sleep(self.seconds)

    class Counting(RateLimitedProcessor):
        async def request_permission(self, **kwargs: Any) -> bool:
            nonlocal checks
            checks += 1
            assert checks < 1000, f"spinning at t={trio.current_time()}"
            return await super().request_permission(**kwargs)

    processor = Counting(RateLimiter(requests=1, period=1.0, burst=1), concurrency_limit=1)
    await processor.enqueue_many([Job(100), Job(1), Job(1)])
    with trio.fail_after(500):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(processor.process)  # the first runs, holding the one token
            await trio.sleep(1.5)
            nursery.start_soon(processor.process)
            await trio.sleep(0.1)
            # the second and third wait for the token, each in a cycle, before their
            # permission is asked: nothing is granted early, nothing deferred
            stats = processor.statistics()
            assert (stats.queued, stats.taken, stats.deferred) == (0, 2, 0)
            assert stats.limits.granted == 1
            await processor.join()  # sleeps until the third's not-before time: no spinning
            nursery.cancel_scope.cancel()
    assert checks < 20


class _Timed(Event):
    """An event that runs *duration* seconds of trio's clock and costs *cost* tokens."""

    def __init__(self, duration: float = 0.0, cost: int = 0) -> None:
        super().__init__()
        self.duration, self.cost = duration, cost

    async def _invoke(self) -> float:
        await trio.sleep(self.duration)
        return trio.current_time()

    @property
    def request(self) -> dict[str, Any]:
        return {"cost": self.cost}


class _Cycles(RateLimitedProcessor):
    """Counts its cycles; past 10,000 it is spinning."""

    __slots__ = ("cycles",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cycles = 0

    async def _cycle(self) -> int:
        self.cycles += 1
        if self.cycles > 10_000:
            raise AssertionError(f"spinning: 10,000 cycles, the clock at {trio.current_time()}")
        return await super()._cycle()


@pytest.mark.parametrize("second", ["join", "execute"])
async def test_a_deferred_event_whose_time_passed_while_capacity_is_held_is_not_a_spin(
    autojump_clock: trio.testing.MockClock, second: str
) -> None:
    """One cycle defers b (not before 0.5 s) and runs a for 10 s on the only unit of
    capacity. A second join() (or the execute() service) takes nothing: it waited until
    b's time, which then stays in the past (nothing asks for b again until a ends), and every
    wait after it ended at once."""
    limiter = RateLimiter(tokens=10, period=1.0)
    assert limiter.try_acquire(10) == 0.0  # the token budget spent: b (cost 5) waits 0.5 s
    processor = _Cycles(limiter, queue_capacity=1)
    b, a = _Timed(cost=5), _Timed(duration=10.0)
    await processor.enqueue_many([b, a])
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(processor.process)  # defers b, runs a
            await trio.testing.wait_all_tasks_blocked()
            assert processor.statistics().next_not_before == pytest.approx(0.5)
            if second == "join":
                await processor.join()
            else:
                await nursery.start(processor.execute)
                await b.wait_completed()
                processor.stop()
    assert (a.status, b.status) == (EventStatus.COMPLETED, EventStatus.COMPLETED)
    assert processor.cycles < 1_000


def _worst_excess(starts: list[float], burst: int, rate: float) -> float:
    """How far the busiest window of *starts* goes past ``burst + seconds * rate``."""
    starts = sorted(starts)
    return max(
        (j - i + 1) - (burst + (starts[j] - starts[i]) * rate)
        for i in range(len(starts))
        for j in range(i, len(starts))
    )


class _Started(_Timed):
    """A timed event that notes when it starts."""

    def __init__(self, starts: list[float], duration: float = 0.0) -> None:
        super().__init__(duration)
        self.starts = starts

    async def _invoke(self) -> float:
        self.starts.append(trio.current_time())
        return await super()._invoke()


async def test_a_grant_is_used_at_once_even_behind_a_concurrency_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """1 request/s, burst 2, one at a time: a grant made before a 10 s wait for the token
    was spent 10 s later, beside two fresh ones (three requests at one instant)."""
    processor = RateLimitedProcessor(
        RateLimiter(requests=1, period=1.0, burst=2), concurrency_limit=1
    )
    starts: list[float] = []
    events = [_Started(starts, 10.0), *(_Started(starts) for _ in range(3))]
    await processor.enqueue_many(events)
    with trio.fail_after(100):
        await processor.join()
    assert all(event.status is EventStatus.COMPLETED for event in events)
    assert _worst_excess(starts, burst=2, rate=1.0) <= 1e-6, starts


@pytest.mark.parametrize("how", ["cycle cancelled", "event cancelled by its caller"])
async def test_an_event_that_never_ran_keeps_no_rate_grant(
    autojump_clock: trio.testing.MockClock, how: str
) -> None:
    limiter = RateLimiter(requests=1, period=10.0, burst=2)
    processor = RateLimitedProcessor(limiter, concurrency_limit=1)
    starts: list[float] = []
    a, b = _Started(starts, 5.0), _Started(starts)
    await processor.enqueue_many([a, b])
    with trio.fail_after(100):
        if how == "cycle cancelled":
            with trio.move_on_after(1):
                await processor.process()  # a runs; b waits for the token: cancelled
            assert b.status is EventStatus.PENDING and b in processor  # back, never started
        else:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(processor.process)
                await trio.testing.wait_all_tasks_blocked()
                b.status = EventStatus.CANCELLED  # as Model.complete does when cancelled
            assert processor.statistics().discarded == 1
    assert starts == [0.0]  # one request went out: one of the burst of two is left
    stats = limiter.statistics()
    assert (stats.granted, stats.requests_available) == (1, 1), stats


async def test_refund_gives_back_an_unused_grant(autojump_clock: trio.testing.MockClock) -> None:
    limiter = RateLimiter(requests=2, period=10.0, tokens=100)
    assert limiter.try_acquire(60) == 0.0
    assert limiter.try_acquire(40) == 0.0
    assert limiter.try_acquire(1) > 0  # both budgets spent
    limiter.refund(40)
    stats = limiter.statistics()
    assert (stats.granted, stats.requests_available, stats.tokens_available) == (1, 1, 40)
    for _ in range(3):  # never past the full burst, whatever is refunded
        limiter.refund(60)
    stats = limiter.statistics()
    assert (stats.requests_available, stats.tokens_available) == (2, 100)
    limiter.refund(-5)  # a bad cost gives back the request only
