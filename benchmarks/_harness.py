"""The child side of a benchmark run: one implementation's scenarios, timed in this process.

Each area module (``benchmarks.events`` and friends) defines ``cases(impl, quick)`` and ends
with ``main(cases)``; ``python -m benchmarks.<area> --impl lionexec|lionagi|raw --json`` then
runs every case of that implementation and prints one JSON line (prefixed with
:data:`MARKER`) for the parent to collect. Progress goes to stderr.

lionagi runs under ``asyncio.run`` (its native loop); lionexec, raw trio and the
equivalent-work floor (``floor``: the same contract in plain trio, only where an area defines
one) under ``trio.run``. Every case is run in a fresh event loop: one warm-up at a small
size, then up to ``repeats`` timed runs (stopping early once ``budget`` seconds are spent);
every run's figure is kept (``samples``), and the reported value is their median, with the
interquartile range and the best beside it. Memory cases trace with :mod:`tracemalloc` and are
run once, after a warm-up. ``report`` cases (long-lived runs) return their own named figures
and run once.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
import traceback
import tracemalloc
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import trio

IMPLS = ("lionexec", "lionagi", "raw", "floor")
MARKER = "BENCH-JSON "
#: The parent's pass number (1, 2, ...). Memory cases, being deterministic, and single-run
#: cases, being slow, run in the first pass only.
ROUND_VARIABLE = "LIONEXEC_BENCH_ROUND"

#: A scenario body: run the work at size ``n`` and return the seconds spent in the measured
#: part (a ``time`` case), ``(retained, peak)`` bytes from a :class:`MemoryProbe` (a
#: ``memory`` case), or ``{suffix: (unit, value or list of values)}`` (a ``report`` case; a
#: list is reported as its median and quartiles).
Body = Callable[[int], Coroutine[Any, Any, Any]]


@dataclass(frozen=True)
class Case:
    """One scenario for one implementation."""

    name: str
    n: int
    body: Body | None
    kind: Literal["time", "memory", "report"] = "time"
    throughput: bool = False
    peak: bool = False
    note: str = ""
    series: str = ""
    unavailable: str = ""
    warmup: int = 1000
    repeats: int | None = None
    budget: float | None = None
    #: ``False``: a ``time`` body's seconds are reported as they are (µs, ``unit="us"``), not
    #: per item (a longest scheduler step, say).
    per_item: bool = True


@dataclass
class Measurement:
    """A case's outcome, as sent to the parent. ``value`` is None when not measured.

    For timed cases ``value`` is the median of ``samples`` (one per run, per item), ``q1`` and
    ``q3`` its interquartile range and ``best`` the smallest.
    """

    scenario: str
    unit: str
    n: int
    value: float | None
    median: float | None = None
    repeats: int = 0
    note: str = ""
    series: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    best: float | None = None
    q1: float | None = None
    q3: float | None = None
    samples: list[float] = field(default_factory=list)

    def summarize(self) -> None:
        """Set value (the median), best and the quartiles from ``samples``."""
        if not self.samples:
            return
        self.value = self.median = statistics.median(self.samples)
        self.best = min(self.samples)
        self.q1, self.q3 = quartiles(self.samples)
        self.repeats = len(self.samples)


def quartiles(samples: list[float]) -> tuple[float, float]:
    """The first and third quartiles (both the value itself for a single sample)."""
    if len(samples) < 2:
        return samples[0], samples[0]
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, q3


def k(n: int) -> str:
    """A size for a scenario name: 20000 -> "20k"."""
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def unavailable(like: list[Case], reason: str) -> list[Case]:
    """The same scenarios, not runnable by this implementation (shown as n/a with *reason*)."""
    fields = {"name", "n", "kind", "peak", "series"}
    return [
        Case(body=None, unavailable=reason, **{f: getattr(c, f) for f in fields}) for c in like
    ]


class MemoryProbe:
    """Retained and peak traced bytes between :meth:`start` and :meth:`stop`.

    Call :meth:`stop` while the completed items are still referenced; it collects garbage
    first, so only what is really retained counts.
    """

    def __init__(self) -> None:
        gc.collect()
        tracemalloc.start()
        gc.collect()
        self.base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()

    def stop(self) -> tuple[int, int]:
        peak = tracemalloc.get_traced_memory()[1]
        gc.collect()
        current = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return current - self.base, peak - self.base


def _runner(impl: str) -> Callable[[Body, int], Any]:
    if impl == "lionagi":
        return lambda body, n: asyncio.run(body(n))
    return lambda body, n: trio.run(body, n)


def measure(case: Case, impl: str, repeats: int, budget: float) -> list[Measurement]:
    """Warm up, then time (or trace) one case."""
    if case.body is None:
        names = [case.name, f"{case.name} (peak)"] if case.peak else [case.name]
        unit = _unit(case)
        return [Measurement(name, unit, case.n, None, note=case.unavailable) for name in names]
    run = _runner(impl)
    run(case.body, max(1, min(case.n, case.warmup)))
    if case.kind == "report":
        gc.collect()
        figures: dict[str, tuple[str, float | list[float]]] = run(case.body, case.n)
        out = []
        for suffix, (unit, figure) in figures.items():
            name = f"{case.name}, {suffix}"
            if isinstance(figure, list):  # several runs: median and quartiles
                m = Measurement(name, unit, case.n, None, note=case.note, samples=figure)
                m.summarize()
            else:
                m = Measurement(name, unit, case.n, figure, repeats=1, note=case.note)
            out.append(m)
        return out
    if case.kind == "memory":
        gc.collect()
        retained, peak = run(case.body, case.n)
        out = [Measurement(case.name, "B/item", case.n, retained / case.n, repeats=1)]
        if case.peak:
            out.append(
                Measurement(f"{case.name} (peak)", "B/item", case.n, peak / case.n, repeats=1)
            )
        return out
    limit = case.repeats or repeats
    spend = case.budget or budget
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < limit:
        gc.collect()
        times.append(run(case.body, case.n))
        if time.perf_counter() - started > spend:
            break
    per = case.n if case.per_item else 1
    result = Measurement(
        case.name,
        _unit(case),
        case.n,
        None,
        note=case.note,
        series=case.series,
        samples=[t / per * 1e6 for t in times],
    )
    result.summarize()
    if case.throughput and result.value:
        result.extra["ops_per_s"] = 1e6 / result.value
    return [result]


def _unit(case: Case) -> str:
    if case.kind == "memory":
        return "B/item"
    return "us/op" if case.per_item else "us"


def _version(impl: str) -> str:
    if impl in ("raw", "floor"):
        return f"trio {trio.__version__}"
    module = __import__(impl)
    return f"{impl} {getattr(module, '__version__', '?')}"


def main(cases: Callable[[str, bool], list[Case]]) -> None:
    """Command line of an area module: run one implementation's cases."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=IMPLS, required=True)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=12.0, help="seconds per case, soft")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.budget = min(args.repeats, 2), min(args.budget, 2.0)

    report: dict[str, Any] = {"impl": args.impl, "results": []}
    try:
        report["version"] = _version(args.impl)
        selected = cases(args.impl, args.quick)
    except Exception as exc:  # an absent or broken library: n/a, not a crash
        traceback.print_exc()
        report["unavailable"] = f"cannot import: {type(exc).__name__}: {exc}"
        selected = []
    if os.environ.get(ROUND_VARIABLE, "1") != "1":
        selected = [c for c in selected if c.kind == "time" and c.repeats != 1]
    for case in selected:
        started = time.perf_counter()
        try:
            results = measure(case, args.impl, args.repeats, args.budget)
        except Exception as exc:
            traceback.print_exc()
            note = f"error: {type(exc).__name__}: {exc}"[:160]
            results = [Measurement(case.name, _unit(case), case.n, None, note=note)]
        for m in results:
            shown = "n/a" if m.value is None else f"{m.value:,.2f} {m.unit}"
            print(
                f"  {args.impl:8} {m.scenario:42} {shown:>16}"
                f"  ({time.perf_counter() - started:.1f}s) {m.note}",
                file=sys.stderr,
                flush=True,
            )
        report["results"].extend(asdict(m) for m in results)
    if args.json:
        print(MARKER + json.dumps(report), flush=True)
