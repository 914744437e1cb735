"""Properties of RateLimitedProcessor on MockClock: nothing lost, no window over the burst
allowance, the long-run rate is the configured one."""

from __future__ import annotations

from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from lionexec.engine import Event, EventStatus
from lionexec.limits import RateLimiter
from lionexec.models import RateLimitedProcessor


@attrs.define(kw_only=True, eq=False)
class Job(Event):
    cost: int = 0

    @property
    def request(self) -> dict[str, Any]:
        return {"cost": self.cost}

    async def _invoke(self) -> float:
        return trio.current_time()


def run_jobs(
    limiter: RateLimiter, arrivals: list[tuple[float, int]], service: bool
) -> tuple[list[Job], RateLimitedProcessor]:
    processor = RateLimitedProcessor(limiter, queue_capacity=7, concurrency_limit=3)
    jobs = [Job(cost=cost) for _, cost in arrivals]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            if service:
                await nursery.start(processor.execute)
            for (gap, _), job in zip(arrivals, jobs, strict=True):
                await trio.sleep(gap)
                await processor.enqueue(job)
            if service:
                for job in jobs:
                    await job.wait_completed()
                processor.stop()
            else:
                await processor.join()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return jobs, processor


def window_max(times: list[float], window: float) -> int:
    times = sorted(times)
    best, j = 0, 0
    for i, start in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] <= start + window + 1e-9:
            j += 1
        best = max(best, j - i)
    return best


@settings(max_examples=40)
@given(
    rate=st.integers(1, 20),
    burst=st.integers(1, 5),
    arrivals=st.lists(
        st.tuples(st.sampled_from([0.0, 0.0, 0.01, 0.3, 1.0]), st.integers(0, 150)),
        min_size=1,
        max_size=40,
    ),
    service=st.booleans(),
)
def test_nothing_is_lost_and_no_window_exceeds_the_allowance(
    rate: int, burst: int, arrivals: list[tuple[float, int]], service: bool
) -> None:
    limiter = RateLimiter(requests=rate, period=1.0, burst=burst, tokens=500, token_burst=100)
    jobs, processor = run_jobs(limiter, arrivals, service)
    for job, (_, cost) in zip(jobs, arrivals, strict=True):
        if cost > 100:  # above the token burst: denied with a reason
            assert job.status is EventStatus.SKIPPED
        else:
            assert job.status is EventStatus.COMPLETED
    assert processor.statistics().queued == 0
    started = [job.response for job in jobs if job.status is EventStatus.COMPLETED]
    for window in (0.1, 0.5, 1.0, 2.5):
        assert window_max(started, window) <= burst + int(window * rate + 1e-9)


def test_long_run_rate_is_within_five_percent() -> None:
    """Offered 1.25x its rate for 30 s, the processor runs N per second (plus the burst)."""
    rate, seconds = 10, 30
    arrivals = [(1.0 / (1.25 * rate), 0)] * int(1.25 * rate * seconds)
    jobs, _ = run_jobs(RateLimiter(requests=rate, period=1.0, burst=3), arrivals, True)
    times = sorted(job.response for job in jobs)
    in_first_30s = sum(1 for t in times if t <= times[0] + seconds)
    assert abs(in_first_30s - rate * seconds) <= 0.05 * rate * seconds
    assert window_max(times, 1.0) <= 3 + rate
