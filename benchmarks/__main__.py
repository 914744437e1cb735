"""``python -m benchmarks``: every area, every implementation, one table.

Each (area, implementation) pair runs in its own subprocess (``python -m benchmarks.<area>
--impl ... --json``) so imports, GC state and memory never leak between implementations. The
implementations: lionexec, the reference (lionagi 0.36.0), the bare raw-trio floor and, for
the areas in :data:`FLOOR_AREAS`, the equivalent-work floor (the same contract in plain trio).
Everything runs in ``--rounds`` passes (two by default) with the implementations in rotated
order; the timed runs of all passes are pooled and reported as a median with its
interquartile range (and the best), so a burst of load from elsewhere on the machine widens
the spread instead of moving the figure; memory and single-run cases run in the first pass
only. The
results are merged into ``benchmarks/results/latest.json`` and ``latest.md`` (a ``--quick``
run writes ``quick.json`` / ``quick.md`` instead) and the table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from . import report
from ._harness import IMPLS, MARKER, ROUND_VARIABLE, Measurement
from .plot import plot

AREAS = (
    "events",
    "processor",
    "tools",
    "act",
    "scaling",
    "server_load",
    "models",
    "workers",
    "journal_cost",
    "dbos_compare",
)
#: Areas with an equivalent-work floor (``--impl floor``); the others run without it.
FLOOR_AREAS = ("act", "journal_cost")
ROOT = Path(__file__).resolve().parent.parent


def run_child(area: str, impl: str, args: argparse.Namespace, round_: int) -> dict[str, Any]:
    """One implementation's results for one area, from a fresh interpreter."""
    python = args.lionagi_python if impl == "lionagi" and args.lionagi_python else sys.executable
    cmd = [python, "-m", f"benchmarks.{area}", "--impl", impl, "--json"]
    cmd += ["--repeats", str(args.repeats), "--budget", str(args.budget)]
    if args.quick:
        cmd.append("--quick")
    try:
        proc = subprocess.run(
            cmd,
            cwd=ROOT,
            env=os.environ | {ROUND_VARIABLE: str(round_)},
            stdout=subprocess.PIPE,
            text=True,
            timeout=args.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"impl": impl, "results": [], "unavailable": f"timed out after {args.timeout}s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARKER):
            result: dict[str, Any] = json.loads(line[len(MARKER) :])
            return result
    return {"impl": impl, "results": [], "unavailable": f"no result (exit {proc.returncode})"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--only", default="", help=f"comma-separated areas of {AREAS}")
    parser.add_argument("--impls", default=",".join(IMPLS), help="comma-separated impls")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per case and pass")
    parser.add_argument("--budget", type=float, default=6.0, help="soft seconds per case")
    parser.add_argument(
        "--rounds", type=int, default=0, help="passes over everything (default: 2, quick: 1)"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per subprocess")
    parser.add_argument("--lionagi-python", default="", help="interpreter for the lionagi side")
    parser.add_argument("--no-write", action="store_true", help="print only; write no files")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.areas = [a for a in args.only.split(",") if a] or list(AREAS)
    args.impl_list = [i for i in args.impls.split(",") if i]
    unknown = set(args.areas) - set(AREAS) | set(args.impl_list) - set(IMPLS)
    if unknown:
        parser.error(f"unknown area or impl: {', '.join(sorted(unknown))}")
    return args


def combine(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Merge a later round's child report into an earlier one: timed runs are pooled."""
    if old is None:
        return new
    kept = {m["scenario"]: m for m in old["results"]}
    for m in new["results"]:
        before = kept.get(m["scenario"])
        if before is None or before["value"] is None:
            kept[m["scenario"]] = m
        elif m["value"] is not None and m.get("samples") and before.get("samples"):
            pooled = Measurement(**before)
            pooled.samples = before["samples"] + m["samples"]
            pooled.summarize()
            if "ops_per_s" in pooled.extra and pooled.value:
                pooled.extra["ops_per_s"] = 1e6 / pooled.value
            kept[m["scenario"]] = asdict(pooled)
    return old | {"results": list(kept.values())}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    runs: dict[str, dict[str, Any]] = {area: {} for area in args.areas}
    loads: dict[str, list[float]] = {area: [] for area in args.areas}
    for round_ in range(1, args.rounds + 1):
        for area in args.areas:
            started = time.perf_counter()
            loads[area].append(os.getloadavg()[0])
            print(f"== {area} (round {round_})", file=sys.stderr, flush=True)
            # rotate the order each round, so no implementation always runs first
            shift = (round_ - 1) % len(args.impl_list)
            for impl in args.impl_list[shift:] + args.impl_list[:shift]:
                if impl == "floor" and area not in FLOOR_AREAS:
                    continue
                child = run_child(area, impl, args, round_)
                runs[area][impl] = combine(runs[area].get(impl), child)
            elapsed = time.perf_counter() - started
            print(f"== {area} (round {round_}): {elapsed:.0f}s", file=sys.stderr, flush=True)
    name = "quick" if args.quick else "latest"
    results_dir = ROOT / "benchmarks" / "results"
    document = report.build(runs, quick=args.quick, loads=loads)
    if not args.no_write:
        document = report.merge(results_dir / f"{name}.json", document)
        report.write(results_dir, name, document)
        png = plot(document, results_dir / ("scaling.png" if name == "latest" else f"{name}.png"))
        print(f"scaling plot: {png or 'not drawn (matplotlib is not installed)'}", file=sys.stderr)
    print(report.markdown(document, only=args.areas))


if __name__ == "__main__":
    main()
