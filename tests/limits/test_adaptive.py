"""The adaptive request rate (additive increase, multiplicative decrease on 429) and the
provider headers a limiter reads; the control loop is driven on trio's MockClock against an
in-process provider that enforces its own limit (no timing assertions: trio's clock)."""

from __future__ import annotations

import datetime
import math

import pytest
import trio
import trio.testing

from lionexec.errors import ConfigurationError
from lionexec.limits import RateLimiter


def rate(limiter: RateLimiter, now: float = 0.0) -> float:
    value = limiter.statistics(now=now).request_rate
    assert value is not None
    return value


def test_a_429_halves_the_rate_once_per_overload_and_never_below_the_floor() -> None:
    limiter = RateLimiter(requests=20, period=1.0, adaptive=True, min_fraction=0.1)
    assert rate(limiter) == 20
    limiter.observe(429, {}, now=0.0)
    assert rate(limiter) == pytest.approx(10)
    # more 429s of the same overload (within the pause it set): no further decrease
    limiter.observe(429, {}, now=0.01)
    limiter.observe(429, {"retry-after-ms": "50"}, now=0.02)
    assert rate(limiter) == pytest.approx(10)
    for step in range(1, 10):
        limiter.observe(429, {}, now=float(step))
    assert rate(limiter, 10.0) == pytest.approx(2)  # the floor: 0.1 * 20
    assert limiter.statistics(now=10.0).rate_decreases == 4


def test_successes_raise_the_rate_about_one_request_per_period_per_period() -> None:
    limiter = RateLimiter(requests=20, period=1.0, adaptive=True)
    limiter.observe(429, {}, now=0.0)
    limiter.observe(429, {}, now=1.0)  # the last 429 came at 10/s; now 5/s
    assert rate(limiter, 1.0) == pytest.approx(5)
    for _ in range(5):  # one period's worth of successes at 5/s
        limiter.observe(200, {}, now=2.0)
    assert rate(limiter, 2.0) == pytest.approx(6, rel=0.05)
    for _ in range(200):
        limiter.observe(200, {}, now=3.0)
    # above the rate of the last 429 (10/s) it probes ten times slower, and never passes 20
    assert 10 < rate(limiter, 3.0) < 14
    for _ in range(10_000):
        limiter.observe(200, {}, now=4.0)
    assert rate(limiter, 4.0) == 20


def test_the_adapted_rate_is_what_the_limiter_grants_to_every_caller() -> None:
    shared = RateLimiter(requests=10, period=1.0, burst=1, adaptive=True)
    assert shared.try_acquire(now=0.0) == 0.0
    shared.observe(429, {}, now=0.0)  # one worker's 429 ...
    # ... spaces every worker's later grants at the lowered rate (5/s: 0.2 s apart)
    assert shared.try_acquire(now=0.1) == 0.0  # (the slot earned before the 429)
    assert shared.try_acquire(now=0.2) == pytest.approx(0.1)
    assert shared.try_acquire(now=0.3) == 0.0


def test_adaptive_options_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="adaptive needs a request limit"):
        RateLimiter(tokens=100, adaptive=True)
    with pytest.raises(ConfigurationError, match="decrease"):
        RateLimiter(requests=1, adaptive=True, decrease=1.5)
    with pytest.raises(ConfigurationError, match="min_fraction"):
        RateLimiter(requests=1, adaptive=True, min_fraction=0)
    plain = RateLimiter(requests=10, period=1.0)
    plain.observe(429, {}, now=0.0)
    assert rate(plain) == 10  # not adaptive: the rate stays


def test_anthropic_rate_limit_headers_pause_until_their_reset() -> None:
    limiter = RateLimiter(requests=100, period=60.0)
    reset = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30)
    headers = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": reset.isoformat().replace("+00:00", "Z"),
    }
    pause = limiter.observe(200, headers, now=0.0)
    assert pause is not None and 28 < pause <= 30
    assert limiter.statistics(now=0.0).paused_for == pytest.approx(pause)
    # left alone: a budget not exhausted, an unreadable or naive time
    for remaining, when in (("3", reset.isoformat()), ("0", "soon"), ("0", "2030-01-01T00:00")):
        other = RateLimiter(requests=100, period=60.0)
        headers = {
            "anthropic-ratelimit-requests-remaining": remaining,
            "anthropic-ratelimit-requests-reset": when,
        }
        assert other.observe(200, headers, now=0.0) is None


async def test_against_a_provider_enforcing_half_the_configured_rate_429s_become_rare(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The control loop on trio's clock: a client set to 20/s, a provider allowing 10/s;
    every call is retried until it succeeds (none lost) and after the first seconds under
    5 % of the requests get a 429."""
    provider = RateLimiter(requests=10, period=1.0, burst=2)
    client = RateLimiter(requests=20, period=1.0, burst=2, adaptive=True)
    log: list[tuple[float, int]] = []
    done = 0

    async def call() -> None:
        nonlocal done
        while True:
            await client.acquire()
            await trio.sleep(0.05)  # the request's round trip
            wait = provider.try_acquire()
            status = 429 if wait else 200
            log.append((trio.current_time(), status))
            headers = {"retry-after-ms": f"{wait * 1000:.0f}"} if wait else {}
            client.observe(status, headers)
            if status == 200:
                done += 1
                return

    async def worker(calls: int) -> None:
        for _ in range(calls):
            await call()

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(worker, 40)
    assert done == 320  # no call lost
    settled = [status for when, status in log if when >= 5.0]
    assert settled and settled.count(429) / len(settled) < 0.05
    successes = sorted(when for when, status in log if status == 200)
    # every 1-second window holds what the provider allows: 10/s plus its burst
    assert all(
        sum(1 for t in successes if start <= t < start + 1.0) <= 12
        for start in (t for t in successes)
    )
    assert not math.isnan(rate(client, trio.current_time()))


@pytest.mark.parametrize(
    "header", ["x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining"]
)
def test_a_smaller_remaining_budget_the_provider_reports_lowers_what_is_granted(
    header: str,
) -> None:
    limiter = RateLimiter(requests=10, period=1.0)
    assert limiter.statistics(now=0.0).requests_available == 10
    limiter.observe(200, {header: "2"}, now=0.0)
    assert limiter.statistics(now=0.0).requests_available == 2
    for ignored in ("50", "-1", "two", "9" * 40):  # never raised; unreadable values ignored
        limiter.observe(200, {header: ignored}, now=0.0)
    assert limiter.statistics(now=0.0).requests_available == 2
    tokens = RateLimiter(tokens=1000, period=60.0)
    tokens.observe(200, {"x-ratelimit-remaining-tokens": "100"}, now=0.0)
    assert tokens.statistics(now=0.0).tokens_available == 100
    assert tokens.try_acquire(150, now=0.0) > 0
