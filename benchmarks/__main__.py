"""``python -m benchmarks``: every area, every implementation, one table.

Each (area, implementation) pair runs in its own subprocess (``python -m benchmarks.<area>
--impl ... --json``) so imports, GC state and memory never leak between implementations. The
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
from pathlib import Path
from typing import Any

from . import report
from ._harness import IMPLS, MARKER

AREAS = ("events", "processor", "tools", "act", "scaling", "server_load")
ROOT = Path(__file__).resolve().parent.parent


def run_child(area: str, impl: str, args: argparse.Namespace) -> dict[str, Any]:
    """One implementation's results for one area, from a fresh interpreter."""
    python = args.lionagi_python if impl == "lionagi" and args.lionagi_python else sys.executable
    cmd = [python, "-m", f"benchmarks.{area}", "--impl", impl, "--json"]
    cmd += ["--repeats", str(args.repeats), "--budget", str(args.budget)]
    if args.quick:
        cmd.append("--quick")
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, timeout=args.timeout, check=False
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
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per case (best-of)")
    parser.add_argument("--budget", type=float, default=12.0, help="soft seconds per case")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per subprocess")
    parser.add_argument("--lionagi-python", default="", help="interpreter for the lionagi side")
    parser.add_argument("--no-write", action="store_true", help="print only; write no files")
    args = parser.parse_args(argv)
    args.areas = [a for a in args.only.split(",") if a] or list(AREAS)
    args.impl_list = [i for i in args.impls.split(",") if i]
    unknown = set(args.areas) - set(AREAS) | set(args.impl_list) - set(IMPLS)
    if unknown:
        parser.error(f"unknown area or impl: {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    runs: dict[str, dict[str, Any]] = {}
    loads: dict[str, float] = {}
    for area in args.areas:
        started = time.perf_counter()
        loads[area] = os.getloadavg()[0]
        print(f"== {area}", file=sys.stderr, flush=True)
        runs[area] = {impl: run_child(area, impl, args) for impl in args.impl_list}
        print(f"== {area}: {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
    name = "quick" if args.quick else "latest"
    results_dir = ROOT / "benchmarks" / "results"
    document = report.build(runs, quick=args.quick, loads=loads)
    if not args.no_write:
        document = report.merge(results_dir / f"{name}.json", document)
        report.write(results_dir, name, document)
    print(report.markdown(document, only=args.areas))


if __name__ == "__main__":
    main()
