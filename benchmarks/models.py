"""Model calls (issue 16): rate accuracy and the cost of a call, against one local provider.

The provider is ``lionexec.models.testing.LocalProvider`` (hypercorn's trio worker, answering
every request with the same small chat completion) in a **process of its own**, started by
each child (``python -m benchmarks.models --provider``, same interpreter) and talked to over
127.0.0.1 by lionexec, lionagi 0.36.0's ``iModel`` and the raw floor alike, so the client's
figures never include the server's work. It records when each request arrived (trio's
clock); ``GET /bench/arrivals`` hands those times over and clears them.

* **Rate accuracy** (once, in the first pass). A limit of ``RATE`` requests per second is kept
  saturated for ``SECONDS`` seconds by ``2 * RATE`` callers that each send a call and wait for
  it, in a loop. lionexec: ``ModelCall`` events on a ``RateLimitedProcessor`` with
  ``RateLimiter(requests=RATE, period=1.0, burst=BURST)``. lionagi: ``iModel.invoke`` with
  ``limit_requests=RATE, interval=1.0`` (its ``RateLimitedAPIExecutor`` refills
  ``limit_requests`` every ``interval``; it has no burst setting). Reported from the server's
  arrival times, over ``SECONDS`` seconds from the first arrival: the achieved rate (issue 16:
  within 5 % of ``RATE``) and the most requests in any closed one-second window (issue 16: not
  over the burst allowance, ``RATE + BURST``).
* **Cost per call.** ``CALLS`` sequential non-streamed calls after a warm-up, in a fresh event
  loop per run: wall time per call (latency at low load) and this process's CPU time per call
  (the client's overhead; the provider's CPU is in its own process). lionexec: through a
  ``RateLimitedProcessor`` whose limit never binds (``capacity_refresh_time`` 0.1 ms), and
  ``ModelCall.invoke()`` alone; one shared ``httpx.AsyncClient`` (keep-alive). lionagi:
  ``iModel.invoke`` with a limit that never binds (it opens an ``httpx.AsyncClient`` per
  request, its own design). raw: ``httpx.AsyncClient.post`` + ``json.loads`` on a shared
  client under trio (the floor).

lionagi is configured with ``requires_tokens=False``: its OpenAI chat endpoint otherwise
counts tokens with tiktoken's ``o200k_base``, which tiktoken downloads on first use (no
network here), and the benchmark sets no token budget on either side. Its ``httpx`` INFO log
line per request (lionagi's provider modules call ``logging.basicConfig(level=INFO)`` on
import) is silenced, which only lowers its figures.

Run alone with ``python -m benchmarks.models --impl lionexec`` (``--quick``: a 5 s window and
fewer calls); as a harness area it speaks the child protocol (``--impl ... --json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import trio

from ._harness import MARKER, ROUND_VARIABLE, Measurement

RATE, BURST, SECONDS, QUICK_SECONDS = 20, 5, 30.0, 5.0
CALLS, QUICK_CALLS, WARMUP = 300, 60, 20
MESSAGES = [{"role": "user", "content": "hi"}]
MODEL = "local-model"
ROOT = Path(__file__).resolve().parent.parent

RATE_ROW = f"models: rate limit {RATE}/s (burst {BURST}), achieved rate"
WINDOW_ROW = f"models: rate limit {RATE}/s (burst {BURST}), busiest 1 s window"
LATENCY_ROW = "models: sequential call through the rate limiter, latency"
CPU_ROW = "models: sequential call through the rate limiter, client CPU"
BARE_LATENCY_ROW = "models: sequential call, ModelCall.invoke() alone, latency"
BARE_CPU_ROW = "models: sequential call, ModelCall.invoke() alone, client CPU"


# -- the provider process -----------------------------------------------------------------------


async def _serve_provider() -> None:
    """``--provider``: serve on 127.0.0.1, print the base URL, stop when stdin closes."""
    from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope

    from lionexec.models.testing import LocalProvider, ProviderLog, Reply

    class BenchProvider(LocalProvider):
        async def __call__(
            self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
        ) -> None:
            if scope["type"] == "http" and scope["path"] == "/bench/arrivals":
                body = json.dumps(self.log.arrivals).encode()
                self.log = ProviderLog()
                headers = [(b"content-type", b"application/json")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body, "more_body": False})
                return
            await super().__call__(scope, receive, send)

    provider = BenchProvider(default=Reply("ok"), model=MODEL)
    async with trio.open_nursery() as nursery:
        base_url = await nursery.start(provider.serve)
        print(base_url, flush=True)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        nursery.cancel_scope.cancel()


class ProviderProcess:
    """The provider in a child process (same interpreter); a context manager."""

    def __enter__(self) -> ProviderProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.models", "--provider"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.base_url = self.process.stdout.readline().strip()
        if not self.base_url.startswith("http://"):
            self.__exit__()
            raise RuntimeError(f"the provider process did not start ({self.base_url!r})")
        return self

    def arrivals(self) -> list[float]:
        """Arrival times since the last call (the provider's trio clock), and clear them."""
        import httpx

        root = self.base_url.removesuffix("/v1")
        times: list[float] = httpx.get(root + "/bench/arrivals", timeout=30).json()
        return times

    def __exit__(self, *exc_info: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def window_max(times: list[float], window: float) -> int:
    """The most of *times* in any closed interval ``[t, t + window]``."""
    times = sorted(times)
    best = j = 0
    for i, start in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] <= start + window:
            j += 1
        best = max(best, j - i)
    return best


# -- rate accuracy ------------------------------------------------------------------------------


async def _saturate_lionexec(base_url: str, seconds: float) -> dict[str, int]:
    import httpx

    from lionexec.engine import EventStatus
    from lionexec.limits import RateLimiter
    from lionexec.models import Endpoint, ModelCall, RateLimitedProcessor

    counts = {"completed": 0, "other": 0}
    limiter = RateLimiter(requests=RATE, period=1.0, burst=BURST)
    processor = RateLimitedProcessor(limiter, concurrency_limit=2 * RATE)
    endpoint = Endpoint(base_url)
    payload = {"model": MODEL, "messages": MESSAGES}
    async with httpx.AsyncClient() as client, trio.open_nursery() as nursery:
        await nursery.start(processor.execute)

        async def caller() -> None:
            while True:
                call = ModelCall(endpoint=endpoint, payload=payload, client=client)
                await processor.enqueue(call)
                await call.wait_completed()
                key = "completed" if call.status is EventStatus.COMPLETED else "other"
                counts[key] += 1

        for _ in range(2 * RATE):
            nursery.start_soon(caller)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()
    return counts


def _lionagi_model(base_url: str, **limits: Any) -> Any:
    import logging

    from lionagi.service.imodel import iModel

    model = iModel(
        provider="openai",
        base_url=base_url,
        model=MODEL,
        api_key="sk-local",
        allow_local_network=True,  # lionagi's SSRF guard refuses 127.0.0.1 otherwise
        requires_tokens=False,  # tiktoken's o200k_base would be downloaded (see the docstring)
        **limits,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return model


async def _saturate_lionagi(base_url: str, seconds: float) -> dict[str, int]:
    import asyncio

    from lionagi.protocols.generic.event import EventStatus

    counts = {"completed": 0, "other": 0}
    model = _lionagi_model(base_url, limit_requests=RATE, interval=1.0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    # The callers stop at the deadline once their call returns (invoke waits at most 10 s),
    # rather than being cancelled: one run that cancelled them mid-invoke did not finish in
    # ten minutes (the cause was not pinned down), and a deadline needs no cancellation.
    async def caller() -> None:
        while loop.time() < deadline:
            call = await model.invoke(messages=MESSAGES)
            done = call is not None and call.status == EventStatus.COMPLETED
            counts["completed" if done else "other"] += 1

    await asyncio.gather(*(caller() for _ in range(2 * RATE)))
    await model.close()
    return counts


def rate_accuracy(impl: str, provider: ProviderProcess, seconds: float) -> list[Measurement]:
    provider.arrivals()  # clear the cost runs' arrivals
    run_for = seconds + 1.5  # the window starts at the first arrival
    if impl == "lionagi":
        import asyncio

        counts = asyncio.run(_saturate_lionagi(provider.base_url, run_for))
        setting = f"iModel(limit_requests={RATE}, interval=1.0), no burst setting"
    else:
        counts = trio.run(_saturate_lionexec, provider.base_url, run_for)
        setting = f"RateLimiter(requests={RATE}, period=1.0, burst={BURST})"
    arrivals = sorted(provider.arrivals())
    inside = [t for t in arrivals if t < arrivals[0] + seconds] if arrivals else []
    achieved = len(inside) / seconds
    worst = window_max(inside, 1.0)
    error = (achieved - RATE) / RATE * 100
    note = (
        f"{setting}; {2 * RATE} callers for {seconds:g} s from the first arrival at the "
        f"provider: {len(inside)} requests, {achieved:.2f}/s ({error:+.1f} % of {RATE}/s), "
        f"busiest 1 s window {worst} (allowance {RATE + BURST}); calls completed "
        f"{counts['completed']}, other outcomes {counts['other']}"
    )
    extra = {
        "configured": float(RATE),
        "allowance": float(RATE + BURST),
        "seconds": seconds,
        "error_percent": error,
    }
    return [
        Measurement(RATE_ROW, "req/s", len(inside), achieved, repeats=1, note=note, extra=extra),
        Measurement(WINDOW_ROW, "requests", len(inside), float(worst), repeats=1, extra=extra),
    ]


# -- cost per call ------------------------------------------------------------------------------


async def _cost_raw(base_url: str, calls: int) -> tuple[float, float]:
    import httpx

    payload = {"model": MODEL, "messages": MESSAGES}
    url = base_url + "/chat/completions"
    async with httpx.AsyncClient() as client:

        async def one() -> None:
            response = await client.post(url, json=payload)
            body = json.loads(response.content)
            assert body["choices"][0]["message"]["content"] == "ok"

        return await _timed(one, calls)


async def _cost_lionexec(base_url: str, calls: int, through: bool) -> tuple[float, float]:
    import httpx

    from lionexec.limits import RateLimiter
    from lionexec.models import Endpoint, ModelCall, RateLimitedProcessor

    payload = {"model": MODEL, "messages": MESSAGES}
    endpoint = Endpoint(base_url)
    processor = RateLimitedProcessor(
        RateLimiter(requests=10**9, period=1.0), capacity_refresh_time=0.0001
    )
    async with httpx.AsyncClient() as client, trio.open_nursery() as nursery:
        await nursery.start(processor.execute)

        async def one() -> None:
            call = ModelCall(endpoint=endpoint, payload=payload, client=client)
            if through:
                await processor.enqueue(call)
                await call.wait_completed()
            else:
                await call.invoke()
            call.assert_completed()

        elapsed = await _timed(one, calls)
        processor.stop()
    return elapsed


async def _cost_lionagi(base_url: str, calls: int) -> tuple[float, float]:
    from lionagi.protocols.generic.event import EventStatus

    model = _lionagi_model(base_url, limit_requests=10**9, interval=60.0)

    async def one() -> None:
        call = await model.invoke(messages=MESSAGES)
        assert call.status == EventStatus.COMPLETED, call.execution.error
        assert call.response["choices"][0]["message"]["content"] == "ok"

    elapsed = await _timed(one, calls)
    await model.close()
    return elapsed


async def _timed(one: Callable[[], Awaitable[None]], calls: int) -> tuple[float, float]:
    """Wall and CPU seconds of *calls* sequential ``one()`` after :data:`WARMUP` untimed ones
    (under trio or asyncio alike)."""
    for _ in range(WARMUP):
        await one()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        await one()
    return time.perf_counter() - wall, time.process_time() - cpu


def cost_per_call(
    impl: str, provider: ProviderProcess, calls: int, repeats: int
) -> list[Measurement]:
    import asyncio

    base_url = provider.base_url
    modes: dict[str, Callable[[], tuple[float, float]]]
    if impl == "lionagi":
        modes = {"through": lambda: asyncio.run(_cost_lionagi(base_url, calls))}
    elif impl == "raw":
        modes = {"through": lambda: trio.run(_cost_raw, base_url, calls)}
    else:
        modes = {
            "through": lambda: trio.run(_cost_lionexec, base_url, calls, True),
            "bare": lambda: trio.run(_cost_lionexec, base_url, calls, False),
        }
    samples: dict[str, tuple[list[float], list[float]]] = {m: ([], []) for m in modes}
    for _ in range(repeats):
        for mode, run in modes.items():
            wall, cpu = run()
            samples[mode][0].append(wall / calls * 1e6)
            samples[mode][1].append(cpu / calls * 1e6)
    notes = {
        "lionexec": "ModelCall on a RateLimitedProcessor (limit never binds), shared client",
        "lionagi": "iModel.invoke (limit never binds; a client per request, its design)",
        "raw": "httpx.AsyncClient.post + json.loads, shared client (the floor)",
    }
    rows = {"through": (LATENCY_ROW, CPU_ROW), "bare": (BARE_LATENCY_ROW, BARE_CPU_ROW)}
    if impl == "raw":  # the floor is the same for both lionexec rows
        samples["bare"] = samples["through"]
    out = []
    for mode, (walls, cpus) in samples.items():
        bare = mode == "bare" and impl != "raw"
        note = "ModelCall.invoke(), shared client" if bare else notes[impl]
        for name, values in zip(rows[mode], (walls, cpus), strict=True):
            m = Measurement(name, "us/op", calls, None, note=note, samples=values)
            m.summarize()
            out.append(m)
    return out


# -- the child protocol -------------------------------------------------------------------------


def run(impl: str, quick: bool, repeats: int, first_pass: bool) -> list[Measurement]:
    calls = QUICK_CALLS if quick else CALLS
    with ProviderProcess() as provider:
        results = cost_per_call(impl, provider, calls, repeats)
        if impl != "raw" and first_pass:
            results += rate_accuracy(impl, provider, QUICK_SECONDS if quick else SECONDS)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.models", description=__doc__)
    parser.add_argument("--impl", choices=("lionexec", "lionagi", "raw"), default="lionexec")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=12.0, help="accepted, unused")
    parser.add_argument("--provider", action="store_true", help="serve the provider (internal)")
    args = parser.parse_args(argv)
    if args.provider:
        trio.run(_serve_provider)
        return
    repeats = min(args.repeats, 2) if args.quick else args.repeats
    first_pass = os.environ.get(ROUND_VARIABLE, "1") == "1"
    report: dict[str, Any] = {"impl": args.impl, "results": []}
    try:
        if args.impl == "lionagi":
            import lionagi

            report["version"] = f"lionagi {lionagi.__version__}"
        elif args.impl == "raw":
            report["version"] = f"trio {trio.__version__}"
        else:
            import lionexec

            report["version"] = f"lionexec {lionexec.__version__}"
        results = run(args.impl, args.quick, repeats, first_pass)
    except Exception as exc:  # an absent or broken library: n/a, not a crash
        traceback.print_exc()
        report["unavailable"] = f"{type(exc).__name__}: {exc}"[:200]
        results = []
    for m in results:
        shown = "n/a" if m.value is None else f"{m.value:,.2f} {m.unit}"
        print(f"  {args.impl:8} {m.scenario:60} {shown:>16}  {m.note}", file=sys.stderr)
    report["results"] = [asdict(m) for m in results]
    if args.json:
        print(MARKER + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
