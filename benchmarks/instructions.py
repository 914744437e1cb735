"""Instructions per call of each ``act`` row, lionexec against the equivalent floor, and of
the SQLite journal's rows (cachegrind).

Wall times on a shared machine drift with the load; instruction counts do not. Each figure is
the difference of two runs of one scenario under ``valgrind --tool=cachegrind`` (one that
only imports and warms up, one that also runs :data:`CALLS` more calls), divided by
:data:`CALLS`: the interpreter's start and the imports cancel out. Needs ``valgrind`` on the
``PATH`` (``apt-get install valgrind``); without it every row says so. Each run takes about
a minute (cachegrind runs Python some 50 times slower).

``python -m benchmarks.instructions`` prints a Markdown table: instructions per call for
lionexec and the floor, their ratio, and the ratio's target beside it (met or missed);
for the governed row, governed against ungoverned lionexec. ``--scenario`` runs one.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Calls in the measured run beyond the warm-up run.
CALLS = 2_000
ROOT = Path(__file__).resolve().parent.parent

#: Row name -> (what lionexec runs, what it is compared with, the target ratio).
ROWS: dict[str, tuple[str, str, float]] = {
    "act: concurrent calls": ("concurrent lionexec", "concurrent floor", 1.2),
    "act: sequential calls": ("sequential lionexec", "sequential floor", 1.2),
    "act: failing calls (concurrent)": ("failing lionexec", "failing floor", 1.2),
    "act: single-call act, in sequence": ("single lionexec", "single floor", 1.3),
    "act: governed / ungoverned (gate, rules, pre/post hooks)": (
        "governed lionexec",
        "concurrent lionexec",
        1.2,
    ),
    # (every instruction of the process: the thread that writes, and the log's folds, too)
    "journal: sequential calls, SQLite": (
        "journal-sequential lionexec",
        "journal-sequential floor",
        1.3,
    ),
    "journal: concurrent calls, SQLite / in memory": (
        "journal-concurrent lionexec",
        "concurrent lionexec",
        2.5,
    ),
}


def _body(scenario: str, impl: str) -> Any:
    from .act import act_body, single_call_body

    if scenario.startswith("journal-"):  # on SQLite: lionexec's journal, or the journal floor
        from . import journal_cost

        strategy = scenario.removeprefix("journal-")
        if impl == "floor":
            return journal_cost.floor_body(strategy, journal_cost._sqlite_target)
        return journal_cost.act_body(strategy, journal_cost._sqlite_target)
    if scenario == "single":
        return single_call_body(impl)
    if scenario == "governed":
        return act_body(impl, governed=True)
    if scenario == "sequential":
        return act_body(impl, "sequential")
    if scenario == "failing":
        return act_body(impl, function="boom")
    return act_body(impl)


def _child(scenario: str, impl: str, calls: int) -> None:
    """Run under cachegrind: a warm-up of 200 calls, then *calls* more (in runs of 1,000)."""
    import trio

    logging.disable(logging.CRITICAL)
    body = _body(scenario, impl)

    async def main() -> None:
        await body(200)
        for _ in range(calls // 1000):
            await body(1000)

    trio.run(main)


_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _instructions(scenario: str, impl: str, calls: int) -> int:
    cmd = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "benchmarks.instructions",
        "--child",
        scenario,
        impl,
        str(calls),
    ]
    env = os.environ | {"PYTHONHASHSEED": "0"}  # (the same hashes in every run)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    found = _REFS.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"cachegrind run failed (exit {proc.returncode}): {proc.stderr[-300:]}")
    return int(found.group(1).replace(",", ""))


def per_call(run: str) -> float:
    """Instructions per call of *run* (``"<scenario> <impl>"``)."""
    scenario, impl = run.split()
    return (_instructions(scenario, impl, CALLS) - _instructions(scenario, impl, 0)) / CALLS


def table(rows: dict[str, tuple[str, str, float]]) -> list[str]:
    out = [
        "| row | lionexec, instructions/call | against | ratio | target |",
        "|---|---|---|---|---|",
    ]
    if shutil.which("valgrind") is None:
        missing = "n/a: valgrind is not installed"
        out += [f"| {name} | {missing} | | | ≤ {t:g}× |" for name, (_, _, t) in rows.items()]
        return out
    measured: dict[str, float] = {}
    for name, (mine, other, target) in rows.items():
        for run in (mine, other):
            if run not in measured:
                measured[run] = per_call(run)
        ratio = measured[mine] / measured[other]
        verdict = "met" if ratio <= target else "**missed**"
        against = f"{other.split()[1]} {other.split()[0]}: {measured[other]:,.0f}"
        out.append(
            f"| {name} | {measured[mine]:,.0f} | {against} | {ratio:.2f}× | "
            f"≤ {target:g}×, {verdict} |"
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__)
    parser.add_argument(
        "--child", nargs=3, metavar=("SCENARIO", "IMPL", "CALLS"), help=argparse.SUPPRESS
    )
    parser.add_argument("--scenario", choices=sorted(ROWS), help="one row only")
    args = parser.parse_args(argv)
    if args.child:
        scenario, impl, calls = args.child
        _child(scenario, impl, int(calls))
        return
    rows = {args.scenario: ROWS[args.scenario]} if args.scenario else ROWS
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
