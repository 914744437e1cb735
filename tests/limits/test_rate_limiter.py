"""The rate limiter: GCRA request budget, token budget, provider feedback, statistics."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from lionexec.errors import ConfigurationError
from lionexec.limits import BudgetExceededError, RateLimiter, parse_duration, retry_after_seconds


def grants(limiter: RateLimiter, times: list[float], cost: int = 0) -> list[float]:
    """Offer a request at each time (sorted); return the times granted."""
    return [t for t in times if limiter.try_acquire(cost, now=t) == 0.0]


def test_burst_then_one_per_interval() -> None:
    limiter = RateLimiter(requests=10, period=1.0, burst=3)
    assert grants(limiter, [0.0] * 5) == [0.0] * 3
    wait = limiter.try_acquire(now=0.0)
    assert wait == pytest.approx(0.1)
    assert limiter.try_acquire(now=0.1) == 0.0
    assert limiter.try_acquire(now=0.1) == pytest.approx(0.1)


def test_token_budget_and_correction() -> None:
    limiter = RateLimiter(tokens=100, period=10.0)
    assert limiter.try_acquire(80, now=0.0) == 0.0
    assert limiter.try_acquire(30, now=0.0) == pytest.approx(1.0)  # 10 tokens per second
    limiter.correct(80, 20, now=0.0)  # the call used 20: 60 come back
    assert limiter.try_acquire(30, now=0.0) == 0.0
    assert limiter.statistics(now=0.0).tokens_charged == 50
    limiter.correct(30, 100, now=0.0)  # more than estimated: charged
    assert limiter.statistics(now=0.0).tokens_available == 0


def test_a_cost_above_the_burst_can_never_be_granted() -> None:
    limiter = RateLimiter(tokens=100, period=1.0)
    with pytest.raises(BudgetExceededError, match="101 tokens"):
        limiter.try_acquire(101, now=0.0)
    with pytest.raises(BudgetExceededError, match="non-negative"):
        limiter.try_acquire(-1, now=0.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"requests": 0},
        {"requests": 1.5},
        {"period": float("nan")},
        {"period": 0},
        {"requests": 1, "burst": 0},
        {"burst": 2},
        {"token_burst": 2},
        {"tokens": True},
    ],
)
def test_bad_configuration_names_the_parameter(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError, match=list(kwargs)[-1]):
        RateLimiter(**kwargs)  # type: ignore[arg-type]


def test_429_and_headers_pause_the_limiter() -> None:
    limiter = RateLimiter(requests=100, period=1.0)
    assert limiter.observe(429, {"Retry-After-Ms": "250"}, now=0.0) == 0.25
    assert limiter.try_acquire(now=0.1) == pytest.approx(0.15)
    assert limiter.try_acquire(now=0.25) == 0.0
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m2.5s"}
    assert limiter.observe(200, headers, now=1.0) == 62.5
    stats = limiter.statistics(now=1.0)
    assert stats.paused_for == 62.5 and stats.requests_available == 0
    assert stats.provider_pauses == 2


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "nan"},
        {"retry-after": "-3"},
        {"retry-after": "1e999"},
        {"retry-after-ms": "x" * 10_000},
        {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "soon"},
    ],
)
def test_hostile_feedback_is_ignored_or_bounded(headers: dict[str, str]) -> None:
    limiter = RateLimiter(requests=1, period=1.0, max_pause=5.0)
    limiter.observe(200, headers, now=0.0)
    assert limiter.statistics(now=0.0).paused_for == 0.0
    limiter.observe(429, {"retry-after": "100000"}, now=0.0)
    assert limiter.statistics(now=0.0).paused_for == 5.0  # cut to max_pause


def test_duration_parsing() -> None:
    assert parse_duration("6m0s") == 360.0
    assert parse_duration("20ms") == 0.02
    assert parse_duration("1h") == 3600.0
    assert parse_duration("1.5") == 1.5
    for bad in ("", "1x", "s", "inf", "nan", "-1", "1s junk"):
        assert parse_duration(bad) is None
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0


@given(
    rate=st.integers(1, 50),
    burst=st.integers(1, 20),
    gaps=st.lists(st.floats(0.0, 0.5, allow_nan=False), min_size=1, max_size=300),
    window=st.floats(0.01, 3.0),
)
def test_no_window_exceeds_the_burst_allowance(
    rate: int, burst: int, gaps: list[float], window: float
) -> None:
    """In any window of w seconds, at most burst + w * rate / period requests are granted."""
    period = 1.0
    limiter = RateLimiter(requests=rate, period=period, burst=burst)
    times, now = [], 0.0
    for gap in gaps:
        now += gap
        times.append(now)
    granted = grants(limiter, times)
    allowance = burst + window * rate / period
    for i, start in enumerate(granted):
        inside = sum(1 for t in granted[i:] if t <= start + window)
        assert inside <= math.floor(allowance + 1e-6), (start, inside, allowance)


@given(rate=st.integers(1, 100), burst=st.integers(1, 10), seconds=st.integers(5, 60))
def test_long_run_rate_is_the_configured_rate(rate: int, burst: int, seconds: int) -> None:
    """Offered far more than it allows, the limiter grants rate * duration (+ burst)."""
    limiter = RateLimiter(requests=rate, period=1.0, burst=burst)
    step = 1.0 / (rate * 7)
    times = [i * step for i in range(int(seconds / step))]
    granted = grants(limiter, times)
    expected = rate * seconds
    assert expected - 1 <= len(granted) <= expected + burst


async def test_acquire_sleeps_until_granted_on_trio_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = RateLimiter(requests=2, period=1.0, burst=1)
    start = trio.current_time()
    for _ in range(5):
        await limiter.acquire()
    assert trio.current_time() - start == pytest.approx(2.0)
    stats = limiter.statistics()
    assert stats.granted == 5 and stats.refused == 4  # one refusal per wait: no polling


async def test_acquire_is_a_checkpoint_and_cancellation_takes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limiter = RateLimiter(requests=1, period=10.0)
    with trio.testing.assert_checkpoints():
        await limiter.acquire()
    with trio.move_on_after(1.0):
        await limiter.acquire()
    assert limiter.statistics().granted == 1
    assert limiter.statistics().requests_available == 0


@pytest.mark.parametrize("cost", [-1, 1.5])
async def test_a_refused_acquire_is_a_checkpoint_too(cost: float) -> None:
    # "Always a checkpoint": the refusal raised before yielding
    limiter = RateLimiter(requests=1, period=1)
    with trio.testing.assert_checkpoints(), pytest.raises(BudgetExceededError):
        await limiter.acquire(cost)


def test_a_reported_usage_holds_grants_back_by_max_pause_at_most(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A provider reporting usage=(10**18, 0) must not make every sharer wait for years.
    limiter = RateLimiter(requests=100, tokens=1000, period=1.0, max_pause=30.0)
    assert limiter.try_acquire(10, now=0.0) == 0.0
    with caplog.at_level("WARNING", logger="lionexec"):
        limiter.correct(10, 10**18, now=0.0)
    wait = limiter.try_acquire(10, now=0.0)
    own = 10 / 1000  # the new request's own 10 tokens, at 1000 per second
    assert 30.0 <= wait <= 30.0 + own + 1e-6
    assert limiter.statistics(now=0.0).usage_capped == 1
    assert "10000000000000000" in caplog.text and "max_pause" in caplog.text
    limiter.correct(10, 10**18, now=0.0)  # a second report adds nothing past the bound
    assert limiter.try_acquire(10, now=0.0) <= 30.0 + own + 1e-6
    assert limiter.statistics(now=0.0).usage_capped == 2
    assert limiter.try_acquire(10, now=31.0) == 0.0  # and it has passed after max_pause
    honest = RateLimiter(tokens=1000, period=1.0, max_pause=30.0)
    honest.correct(0, 1500, now=0.0)  # within the bound: charged as reported
    assert honest.statistics(now=0.0).usage_capped == 0
    assert honest.try_acquire(1, now=0.0) == pytest.approx(0.501, abs=1e-3)
