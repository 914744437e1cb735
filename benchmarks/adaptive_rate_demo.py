"""Adaptive back-off against a provider that enforces half the configured rate.

The local provider (``LocalProvider`` with a ``RateLimiter`` of its own: 10 requests per
second, burst 1) answers ``429`` with ``retry-after-ms``, ``Retry-After`` and
``x-ratelimit-*`` headers when a request comes too early. The client is set to 20 per second
(burst 1), with ``adaptive=True``; ``WORKERS`` workers send chat calls back to back through
one pooled client for ``SECONDS`` seconds, every call retried on ``429`` until it succeeds.

Reported from the provider's own log (arrival times, statuses): requests, ``429``\\ s over the
run and after the first ``SETTLE`` seconds, calls completed and lost, the most successful
requests in any 1-second window (sliding, from the first), the client's rate at the end.

Run: ``python -m benchmarks.adaptive_rate_demo [--seconds 30] [--fixed]`` (``--fixed``: the
same without ``adaptive``, for comparison).
"""

from __future__ import annotations

import argparse
import bisect

import httpx
import trio

from lionexec.limits import RateLimiter
from lionexec.models import Endpoint, ModelCall
from lionexec.models.testing import LocalProvider, Reply

PROVIDER_RATE = 10
CLIENT_RATE = 20
WORKERS = 20
SETTLE = 5.0
PAYLOAD = {"model": "local-model", "messages": [{"role": "user", "content": "hi"}]}


async def main(seconds: float, adaptive: bool) -> None:
    provider = LocalProvider(
        default=Reply("ok"), limiter=RateLimiter(requests=PROVIDER_RATE, period=1.0, burst=1)
    )
    client_limiter = RateLimiter(requests=CLIENT_RATE, period=1.0, burst=1, adaptive=adaptive)
    completed = lost = 0
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        endpoint = Endpoint(base_url)
        start = trio.current_time()
        async with httpx.AsyncClient() as client:

            async def worker() -> None:
                nonlocal completed, lost
                while trio.current_time() - start < seconds:
                    call = ModelCall(
                        endpoint=endpoint,
                        payload=PAYLOAD,
                        client=client,
                        limiter=client_limiter,
                        rate_limit_retries=10_000,
                    )
                    await call.invoke()
                    if call.execution.error is None:
                        completed += 1
                    else:
                        lost += 1

            async with trio.open_nursery() as workers:
                for _ in range(WORKERS):
                    workers.start_soon(worker)
        nursery.cancel_scope.cancel()
    log = provider.log
    arrivals = [t - log.arrivals[0] for t in log.arrivals]
    statuses = log.statuses
    ok = sorted(t for t, s in zip(arrivals, statuses, strict=True) if s == 200)
    settled = [s for t, s in zip(arrivals, statuses, strict=True) if t >= SETTLE]
    worst = max(bisect.bisect_left(ok, t + 1.0) - i for i, t in enumerate(ok))
    first = bisect.bisect_left(ok, 1.0)
    stats = client_limiter.statistics()
    print(f"adaptive={adaptive} provider {PROVIDER_RATE}/s (burst 1), client {CLIENT_RATE}/s")
    print(
        f"  {len(statuses)} requests, {statuses.count(429)} got 429 "
        f"({100 * statuses.count(429) / len(statuses):.1f} %)"
    )
    print(
        f"  after {SETTLE:g} s: {len(settled)} requests, {settled.count(429)} got 429 "
        f"({100 * settled.count(429) / max(1, len(settled)):.1f} %)"
    )
    print(f"  calls completed {completed}, lost {lost}; achieved {len(ok) / seconds:.2f}/s")
    print(
        f"  most successes in any 1-s window: {worst} (budget {PROVIDER_RATE}); "
        f"first second: {first}"
    )
    print(f"  client rate at the end {stats.request_rate:.2f}/s, {stats.rate_decreases} decreases")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()
    trio.run(main, args.seconds, not args.fixed)
