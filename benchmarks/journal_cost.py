"""Journaled act against in-memory act: cost per call, and recovery time.

``python -m benchmarks.journal_cost [--postgres URL] [--calls 1000] [--repeats 3]``

For 1k concurrent calls (one ``act`` batch) and 1k sequential calls (``strategy=
"sequential"``) of a trivial async tool: microseconds per call with no journal (a plain
``Branch()``), with a SQLite journal (a file in a temporary directory, WAL,
``synchronous=NORMAL``) and, given ``--postgres``, with a PostgreSQL journal (a fresh
database per run). Then the time ``recover`` takes for ``--unfinished`` journaled calls left
without an outcome (unsafe: each gets ``interrupted``). Medians of ``--repeats`` runs, with
min and max. Not part of ``nox -s bench`` yet.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from lionexec import _unstructure
from lionexec.act import Branch
from lionexec.conversation import ActionRequest
from lionexec.journal import Journal, open_journal
from lionexec.journal.api import canonical_json
from lionexec.journal.store import Batch, MessageRow, RequestOp
from lionexec.tools import Tool


async def noop(x: int) -> int:
    return x


TOOL = Tool.from_function(noop, effect="pure")


def proposals(n: int) -> list[dict[str, Any]]:
    return [{"function": "noop", "arguments": {"x": i}} for i in range(n)]


async def run_act(branch: Branch, n: int, strategy: str) -> float:
    batch = proposals(n)
    start = time.perf_counter()
    responses = await branch.act(batch, strategy=strategy)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - start
    assert all(r.success for r in responses)
    return elapsed


async def in_memory(n: int, strategy: str) -> float:
    branch = Branch()
    branch.register_tools(TOOL)
    return await run_act(branch, n, strategy)


def journaled(make: Callable[[], Journal]) -> Callable[[int, str], Awaitable[float]]:
    async def measure(n: int, strategy: str) -> float:
        async with make() as journal:
            branch = await journal.branch()
            branch.register_tools(TOOL)
            async with branch:
                start = time.perf_counter()
                await run_act(branch, n, strategy)
                await branch.sinks[0].flush()  # type: ignore[attr-defined]  # outcomes committed
                return time.perf_counter() - start

    return measure


async def recovery(make: Callable[[], Journal], n: int) -> float:
    """Time to resolve *n* unfinished journaled calls (a crash left them: unsafe)."""
    branch_id = str(uuid.uuid4())
    unsafe = Tool.from_function(noop, name="noop")
    batch = Batch(branches=[(branch_id, time.time())])
    for i in range(n):
        request = ActionRequest.create("noop", {"x": i})
        record = _unstructure.converter.unstructure(request)
        batch.messages.append(
            MessageRow(branch_id, i, str(request.id), request.kind, json.dumps(record))
        )
        batch.requests.append(
            RequestOp(
                key=f"{branch_id}/{request.call_id}",
                branch_id=branch_id,
                call_id=request.call_id,
                request_id=str(request.id),
                function="noop",
                arguments=canonical_json({"x": i}),
                effect="unsafe",
                at=time.time(),
            )
        )
    first = make()
    async with first as journal:
        await journal.backend.run(lambda store: store.commit(batch), cancellable=False)
    async with open_journal(first.target) as journal:
        start = time.perf_counter()
        report = await journal.recover([unsafe])
        elapsed = time.perf_counter() - start
        assert report.counts() == {"interrupted": n}
    return elapsed


def summary(samples: list[float], n: int) -> dict[str, float]:
    per_call = sorted(s / n * 1e6 for s in samples)
    return {
        "median_us": round(statistics.median(per_call), 1),
        "min_us": round(per_call[0], 1),
        "max_us": round(per_call[-1], 1),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="lionexec-journal-bench-"))
    backends: dict[str, Callable[[], Journal]] = {}
    counter = iter(range(1_000_000))
    backends["sqlite"] = lambda: open_journal(tmp / f"j{next(counter)}.db")
    if args.postgres:
        import psycopg

        def fresh_pg() -> Journal:
            name = "bench_" + uuid.uuid4().hex[:10]
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
            return open_journal(args.postgres.rsplit("/", 1)[0] + "/" + name)

        backends["postgres"] = fresh_pg
    results: dict[str, Any] = {"calls": args.calls, "rows": {}}
    for strategy in ("concurrent", "sequential"):
        subjects: dict[str, Callable[[int, str], Awaitable[float]]] = {"memory": in_memory}
        for name, make in backends.items():
            subjects[name] = journaled(make)
        for name, measure in subjects.items():
            samples = [await measure(args.calls, strategy) for _ in range(args.repeats)]
            row = summary(samples, args.calls)
            row["calls_per_s"] = round(1e6 / row["median_us"])
            results["rows"][f"{strategy}/{name}"] = row
        base = results["rows"][f"{strategy}/memory"]["median_us"]
        for name in backends:
            row = results["rows"][f"{strategy}/{name}"]
            row["x_memory"] = round(row["median_us"] / base, 2)
    for name, make in backends.items():
        samples = [await recovery(make, args.unfinished) for _ in range(1)]
        results["rows"][f"recover_{args.unfinished}/{name}"] = {"seconds": round(samples[0], 2)}
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", default=None, help="an admin URL of a PostgreSQL server")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--unfinished", type=int, default=10_000)
    print(json.dumps(trio.run(main, parser.parse_args()), indent=2))
